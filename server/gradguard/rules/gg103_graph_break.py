"""GG103 graph-break: a tensor that requires grad is rebuilt without its graph and fed back into a loss."""

from __future__ import annotations

import ast
import dataclasses
import re

from ..diagnostics import Fix, Severity, TextEdit
from ..fixes.callers import through_callers
from ..fixes.context import CannotFix, FixContext
from ..fixes.edits import Rewrite, return_at_end
from ..fixes.identity import FindingId
from ..fixes.moves import grad_off, move_statements_after, units
from ..fixes.writes import cst_mod, parse_expr, short
from ..inference.events import (Finding, GradOffBackward, GraphBreak, GuardedUnfreeze, InertFlag, Mutation,
                                NumpyRefused, ReplacedParameter, UnreturnedLoss, CopyTrained)
from ..inference.followed import parameter_names
from ..inference.hooks import DroppedOutput
from ..inference.sharing import Moment, Report
from ..inference.values import Tensor
from ..knowledge.names import (GRAPH_REBUILDING_FACTORIES, LEGACY_FLOAT_CONSTRUCTORS, NUMPY_ARRAY_METHOD_TWINS,
                               NUMPY_REFUSED, NUMPY_SUBSCRIPT_TWINS, NUMPY_TWIN_DEFAULTS, NUMPY_TWINS)
from ..messages import Message, other_file
from ..statements import block_of
from ..statements import calls, dotted_root, every_node, is_dotted, names_read, number_written_out
from ..statements import walk as walk_statements
from ..text import apply_edits
from .base import Example, Rule
from .common import first_conflict

MESSAGE = "element 0 of tensors does not require grad and does not have a grad_fn"


DETACHED_VIEW_MESSAGE = "Can't detach views in-place. Use detach() instead."
DETACHED_SAVED_MESSAGE = "Trying to use a saved tensor that has been detached in-place"


def check(event):
    if isinstance(event, Mutation) and event.kind == "detach":
        yield from _check_detach_in_place(event)
        return
    if isinstance(event, InertFlag):
        yield from _check_flag(event)
        return
    if isinstance(event, ReplacedParameter):
        yield from _check_replaced(event)
        return
    if isinstance(event, CopyTrained):
        yield from _check_copy_trained(event)
        return
    if isinstance(event, GuardedUnfreeze):
        yield from _check_guarded_unfreeze(event)
        return
    if isinstance(event, GradOffBackward):
        yield from _check_grad_off(event)
        return
    if isinstance(event, UnreturnedLoss):
        yield from _check_unreturned(event)
        return
    if isinstance(event, NumpyRefused):
        yield from _check_numpy_refused(event)
        return
    if isinstance(event, DroppedOutput):
        yield from _check_dropped_output(event)
        return
    if isinstance(event, GraphBreak) and event.number_backward is not None and not event.cut:
        yield from _check_number_backward(event)
        return
    if not isinstance(event, GraphBreak) or event.reached is None:
        return
    if event.cut:
        yield from _check_cut(event)
        return
    sink = event.reached
    where = Message.format("the backward on {sink}" if sink.kind == "backward" else
                           "backward through the value returned on {sink}", sink=sink.node)
    yield Finding(
        "GG103",
        event.node,
        Message.format(
            "{how}: values are read out of a tensor that requires grad and used again without their graph, so "
            "{where} gets no gradient through them (gradients silently become None or miss this term, or "
            'backward raises "{torch}"). Keep tensors: `torch.stack`/`torch.cat`, arithmetic on tensors instead of '
            "`.item()`/`float()`, no numpy round trips.",
            how=event.how, where=where, torch=MESSAGE),
        certain=event.certain,
        related=[*([(event.rebuilt_at, "the values become a tensor again here, without their graph")]
                   if event.rebuilt_at is not None else []),
                 (sink.node, "the backward that loses this gradient")],
        data={**({"of_tensor": True} if event.of_tensor else {}),
              **({"of_list": event.of_list} if event.of_list is not None else {}),
              **({"rebuilt_at": event.rebuilt_at} if event.rebuilt_at is not None else {}),
              **({"rebuilds_its_list": event.rebuilds_its_list} if event.rebuilds_its_list is not None else {}),
              **({"constant_in": event.constant_in} if event.constant_in is not None else {})},
    )


def _check_detach_in_place(mutation: Mutation):
    """``t.detach_()`` where torch refuses it: on a view at once, and on a tensor an op saved as an input when the
    backward unpacks that save (the truncation it was meant for never happens: it cuts no graph already built)."""
    if mutation.refused_view:
        yield Finding(
            "GG103",
            mutation.node,
            Message.format(
                '`.detach_()` on a view of {label}; torch raises here: "{torch}" Rebind the name '
                "to a detached copy instead (`x = x.detach()`).", label=mutation.target.label,
                torch=DETACHED_VIEW_MESSAGE),
            related=[(mutation.target.origin, "the view is made here")] if mutation.target.origin else [],
            mutation=mutation, data={"detach": True},
        )
        return
    conflict = first_conflict(mutation)
    if conflict is None or conflict.sink.kind != "backward":
        return
    save = conflict.save
    yield Finding(
        "GG103",
        mutation.node,
        Message.format(
            '`.detach_()` detaches {label} in place, but `{op}` on {saved} saved it as an input for backward, so the '
            'backward on {sink} raises "{torch}": detaching in place does not cut the graph already built from it. '
            "Detach out of place where the value is handed on (`h = h.detach()`) to truncate the history.",
            label=mutation.target.label, op=save.op, saved=save.node, sink=conflict.sink.node,
            torch=DETACHED_SAVED_MESSAGE),
        certain=save.certain and mutation.grad_mode_known,
        related=[(save.node, f"{save.op} saves it for backward here"), (conflict.sink.node, "backward raises here")],
        mutation=mutation, data={"detach": True},
    )


def _check_number_backward(event: GraphBreak):
    """The loss is a Python number (or NumPy value) computed from values read out of tensors: ``.backward()`` on it
    raises AttributeError, and the line that read them out is where the graph was left."""
    yield Finding(
        "GG103",
        event.node,
        Message.format(
            "{how}: values are read out of a tensor that requires grad, and the loss computed from them is a Python "
            "number, not a tensor, so `.backward()` on {sink} raises AttributeError (a number has no `backward`). Keep the tensor in the loss: arithmetic on tensors instead of "
            "`.item()`/`float()`.", how=event.how, sink=event.number_backward),
        certain=event.certain,
        related=[(event.number_backward, "`.backward()` on a number raises here")],
    )


def _check_flag(flag: InertFlag):
    """``module.requires_grad = False``, proven to do nothing by a later backward that gives the module's
    parameters gradients (and, when one follows, the update that then changes them)."""
    if flag.reached is None:
        return
    then = (Message.format(", and {what} on {read} updates them", what=flag.updated.what, read=flag.updated.node)
            if flag.updated is not None else "")
    yield Finding(
        "GG103",
        flag.node,
        Message.format(
            "`requires_grad` on an nn.Module is a plain attribute that nothing in torch reads: `{module}`'s "
            "parameters still require grad, the backward on {sink} gives them gradients{then}, silently. "
            "Call `{module}.requires_grad_(False)`, which sets it on every parameter.",
            module=flag.name, sink=flag.reached.node, then=then),
        related=[(flag.reached.node, "the backward that still reaches the module's parameters"),
                 *([(flag.updated.node, "updates the parameters meant to be frozen")] if flag.updated else [])],
        data={"flag": True},
    )


def _check_guarded_unfreeze(event: GuardedUnfreeze):
    """``if p.requires_grad: p.requires_grad = flag`` run to unfreeze parameters frozen earlier: the guard is False
    for each of them, the write never runs, and the next backward gives them no gradient."""
    if event.reached is None:
        return
    called = Message.format(" (true in the call on {call})", call=event.call) if event.call is not None else ""
    yield Finding(
        "GG103",
        event.node,
        Message.format(
            "This guard reads the flag its body writes: the parameters were frozen on {frozen}, so "
            "`requires_grad` is False for each of them and the write setting it to `{value}`{called} never runs. "
            "They stay frozen, and the backward on {sink} gives them no gradient, silently. Drop the guard and "
            "set the flag on every parameter.",
            frozen=event.frozen, value=event.value, called=called, sink=event.reached.node),
        related=[(event.frozen, "freezes the parameters"),
                 *([(event.call, "meant to unfreeze them")] if event.call is not None else []),
                 (event.reached.node, "the backward that gives them no gradient")],
        data={"guarded_unfreeze": event},
    )


def _check_grad_off(event: GradOffBackward):
    """``.backward()`` on a loss computed with grad mode off from tensors that require grad (a ``torch.no_grad()``
    block, ``torch.set_grad_enabled(False)``, a ``@torch.no_grad()`` function that runs the code): autograd
    recorded nothing, so the loss has no grad_fn and backward raises.  Reported where grad mode is switched off,
    or for a decorated function at the call it runs the computation through (where the probe reports it too)."""
    how = (Message.text("this switches it off") if event.node is event.turned_off else
           Message.format("{deco} decorates the function it runs in or calls", deco=event.turned_off))
    yield Finding(
        "GG103",
        event.node,
        Message.format(
            "Grad mode is off here ({how}), and {label}, which the backward on {backward} runs from, is computed "
            "under it from tensors that require grad (at {op}): autograd recorded no graph, so it has no grad_fn "
            "and that backward raises \"{torch}\". Compute the loss with grad mode on: turn it back on before "
            "this, or wrap the computation in `torch.enable_grad()`.",
            how=how, label=event.label, backward=event.backward, op=event.computed, torch=MESSAGE),
        related=[*([(event.turned_off, "grad mode is switched off here")] if event.node is not event.turned_off
                   else []),
                 (event.computed, "runs with grad mode off: autograd records nothing"),
                 (event.backward, "backward raises here")],
        data={"grad_off": event},
    )


def _check_numpy_refused(event: NumpyRefused):
    """NumPy turning a tensor that requires grad into an array: torch refuses, at this call."""
    what = "one of the tensors in the list it is given" if event.in_list else "the tensor it is given"
    yield Finding(
        "GG103",
        event.node,
        Message.format(
            "`{function}(...)` turns {what} into a NumPy array, and {label} requires grad: torch raises here "
            "\"{torch}\" (an array carries no graph, so a loss computed from it could not train anything). "
            "Compute it with torch (`torch.stack(...)`, `.sum()`, `.mean()`) to keep the gradient, or `.detach()` "
            "it if the values are only for logging.",
            function=event.function, what=what, label=event.label, torch=NUMPY_REFUSED),
        data={"numpy_refused": event},
    )


def _check_dropped_output(event: DroppedOutput):
    """A forward hook that rebinds its output parameter and returns nothing: torch keeps the module's output as it
    was, and the backward through it never sees the new value."""
    sink = event.reached()
    if sink is None:
        return
    yield Finding(
        "GG103",
        event.node,
        Message.format(
            "This rebinds the forward hook's local `{name}` (registered with `register_forward_hook` on {registered} "
            "for {hooked}), which nothing reads afterwards, and the hook returns nothing: torch uses only the value "
            "a forward hook returns as the module's output, so the output stays as it was, and the backward on "
            "{sink} runs through it without the new value, silently. Return the new output from the hook, computed "
            "from `{name}` itself (not its `.data`) so that gradients follow it.",
            name=event.name, registered=event.registered, hooked=event.hooked, sink=sink.node),
        related=[(event.registered, "the hook is registered here"),
                 (sink.node, "the backward through the unchanged output")],
        data={"dropped_output": True},
    )


def _check_unreturned(event: UnreturnedLoss):
    """A Lightning-style ``training_step`` that computes its loss and returns nothing: the trainer's automatic
    optimization runs backward and the optimizer step only on the returned loss, so every batch is skipped."""
    yield Finding(
        "GG103",
        event.node,
        Message.format(
            "`{hook}` computes {label} (on {at}), which requires grad, and returns nothing: under automatic "
            "optimization the trainer runs backward and the optimizer step only on the loss `{hook}` returns (a "
            "tensor, or a dict holding it under \"loss\"), and with None it skips the batch, so nothing trains, "
            "silently. Return the loss.", hook=event.hook, label=event.label, at=event.computed),
        related=[(event.computed, "the tensor that requires grad is computed here")],
        data={"unreturned": event.computed},
    )


def _check_replaced(event: ReplacedParameter):
    """A parameter or submodule replaced after an optimizer took the old one, proven by a later backward that
    gives the new parameters gradients no optimizer applies.  Reported at the line to change (``site``): the
    assignment, or the call that leads to the replacement in the function that uses the optimizer."""
    if event.reached is None:
        return
    what = "parameter" if isinstance(event.new, Tensor) else "module"
    built = event.optimizer.ctor
    site = event.site or event.node
    effect = Message.format(
        "the optimizer goes on updating the old tensors, which the model no longer uses, and the gradients the "
        "backward on {sink} gives the new ones are applied by no optimizer, silently.", sink=event.reached.node)
    if event.built is not None and site is not event.node:
        yield _built_before_replacement(event, what, site)
        return
    if site is event.node:
        message = Message.format(
            "`{name}` gets a new {what} after the optimizer built on {built} took the parameters of the old one: "
            "{effect} Build the optimizer after this assignment, or write the new values into the existing "
            "parameters (`.copy_()` under `torch.no_grad()`).", name=event.name, what=what, built=built, effect=effect)
    else:
        message = Message.format(
            "This call gives `{name}` a new {what} (on {at}), {held} the optimizer this function uses (built on "
            "{built}) does not hold (it holds the old one's): {effect} Give the optimizer the new parameters here, "
            "or build it after this call.", name=event.name, what=what, at=event.node, built=built,
            held=Message.text("a tensor" if what == "parameter" else "with parameters"), effect=effect)
    yield Finding(
        "GG103",
        site,
        message,
        related=[*([(event.node, f"`{event.name}` is assigned the new {what} here")] if site is not event.node else []),
                 *([(built, "the optimizer takes the old parameters here")] if built is not None else []),
                 (event.reached.node, "the backward that reaches the new parameters")],
        data={"replaced_parameter": True} if site is event.node and isinstance(event.new, Tensor) else
        {"built_before": event} if event.built is not None else {},
    )


def _built_before_replacement(event: ReplacedParameter, what: str, site: ast.AST) -> Finding:
    """The optimizer built just before the line that replaces a module it holds, in the same block, with nothing
    between reading it (``inference/stale_optimizers.py``): built after that line, it takes the new parameters."""
    by = (Message.format("the assignment on {at}", at=site) if site is event.node else
          Message.format("the call on {call} (which assigns it on {at})", call=site, at=event.node))
    if event.use is not None:
        effect = Message.format(
            "the step on {step} updates the old parameters, which the model no longer uses, and the gradients the "
            "backward on {sink} gives the new ones are applied by no optimizer, silently.",
            step=event.use, sink=event.reached.node)
    else:
        effect = Message.format(
            "the optimizer holds only the old parameters, which the model no longer uses, and the gradients the "
            "backward on {sink} gives the new ones reach no optimizer, silently.", sink=event.reached.node)
    return Finding(
        "GG103",
        event.built,
        Message.format(
            "This optimizer takes the parameters the model holds now, and {by} then gives `{name}` a new {what}: "
            "{effect} Build the optimizer after {that}, so that it takes the new parameters.",
            name=event.name, by=by, what=what, effect=effect,
            that=Message.text("that assignment" if site is event.node else "that call")),
        related=[*([(site, "this call replaces the module")] if site is not event.node else []),
                 (event.node, f"`{event.name}` is assigned the new {what} here"),
                 (event.reached.node, "the backward that reaches the new parameters"),
                 *([(event.use, "the optimizer steps here, without the new parameters")] if event.use is not None
                   else [])],
        data={"built_before": event},
    )


def _check_copy_trained(event: CopyTrained):
    """A deep copy of a module trained with the optimizer built on the original: reported where the copy is handed
    that optimizer (a constructor given both), else at the copy."""
    if event.reached is None or event.optimizer is None:
        return
    built = event.optimizer.ctor
    effect = Message.format(
        "the backward on {sink} gives the copy's parameters gradients, which no optimizer holds, and `{step}` on "
        "{at} updates the original's parameters, which no backward reaches: the copy never trains, silently.",
        sink=event.reached.node, step=ast.unparse(event.step), at=event.step)
    if event.separated is not None:
        yield _separated_copy(event, built)
        return
    if event.site is not event.node:
        message = Message.format(
            "This call hands a deep copy of a module (made on {made}), which has parameters of its own, the "
            "optimizer built on {built}, which holds the original's parameters: {effect} Build a new optimizer over "
            "the copy's parameters for it.", made=event.node, built=built, effect=effect)
    else:
        message = Message.format(
            "`copy.deepcopy` makes a module with parameters of its own, and the optimizer built on {built} holds "
            "the original's: {effect} Build an optimizer over the copy's parameters, or train the original.",
            built=built, effect=effect)
    yield Finding(
        "GG103",
        event.site,
        message,
        related=[*([(event.node, "the copy is made here")] if event.site is not event.node else []),
                 *([(built, "the optimizer takes the original's parameters here")] if built is not None else []),
                 (event.reached.node, "the backward that reaches the copy's parameters"),
                 (event.step, "the step that updates only the original's parameters")],
        data={"copy_trained": event} if event.site is not event.node else {},
    )


def _separated_copy(event: CopyTrained, built):
    """The optimizer serialised apart from its module in a class's ``__getstate__``: loaded back in the deep copy, it
    holds parameters of its own, not those of the module the copy holds."""
    message = Message.format(
        "This `torch.save` serialises the optimizer apart from the module it trains: {where} {made}, its load holds "
        "copies of the parameters of its own, not those of the loaded module. The backward on {sink} "
        "gives the copied module's parameters gradients, which no optimizer holds, and `{step}` on {at} updates the "
        "optimizer's own copies, which the forward never uses: the copy never trains, silently. Save the module and "
        "the optimizer together, in one `torch.save`, so that their parameters stay shared.",
        where="loaded back on" if event.loaded else "in the deep copy made on", made=event.node, sink=event.reached.node,
        step=ast.unparse(event.step), at=event.step)
    return Finding(
        "GG103",
        event.site,
        message,
        related=[(event.node, "the optimizer is loaded here" if event.loaded else "the copy is made here"),
                 *([(built, "the optimizer is built here")] if built is not None else []),
                 (event.reached.node, "the backward that reaches the copied module's parameters"),
                 (event.step, "the step that updates only the optimizer's own copies")],
    )


def _check_cut(event):
    """A `.detach()`/`.data` is a finding only when gradients the code uses never arrive through any backward, or
    when what it cut is a whole term of a loss that a backward runs from (the term then adds nothing)."""
    if event.grad_off is not None:
        yield from _check_grad_off_term(event)
        return
    if event.starved is None and event.dead_in is not None:
        yield Finding(
            "GG103",
            event.node,
            Message.format(
                "{how} cuts this value from its graph, and the loss the backward on {sink} runs from adds it as a "
                "term computed only from cut values: that term has no gradient, so it changes no gradient at all "
                "(whatever it was computed from learns nothing from it). Drop {how} if the term should train.",
                how=event.how, sink=event.dead_in),
            certain=event.certain,
            related=[(event.dead_in, "the backward that gets nothing from this term")],
            data={**_cut_data(event), **({"cut_again": True} if event.cut_again else {})},
        )
        return
    if event.starved is None and event.term_starved is not None:
        sink, read = event.term_starved
        which = ("the parameters {what} on {read} then updates" if read.updates else
                 "the parameters whose gradients {what} on {read} reads (the optimizer built on {held} holds them "
                 "to train)")
        yield Finding(
            "GG103",
            event.node,
            Message.format(
                "{how} cuts this value from its graph, and the loss the backward on {sink} runs from adds a term "
                "built on it that reaches none of " + which + ", while its other terms reach them: that term gives "
                "them no gradient, silently. Drop {how} if the term should train them.",
                how=event.how, sink=sink.node, what=read.what, read=read.node, held=read.held_by),
            certain=event.certain,
            related=[(sink.node, "the backward whose term gets no gradient through the cut"),
                     (read.node, "updates the parameters that term never reaches" if read.updates else
                      "reads the gradients of parameters that term never reaches")],
            data=_cut_data(event),
        )
        return
    if event.starved is None and event.kept_in_part is not None and event.reached is not None:
        sink = event.reached
        where = Message.format("the backward on {sink}" if sink.kind == "backward" else
                               "backward through the value this forward returns on {sink}", sink=sink.node)
        yield Finding(
            "GG103",
            event.node,
            Message.format(
                "{how} cuts this tensor's history, and {write} then writes values computed from that same history "
                "with their graph into part of the copy: {where} gets gradient through the history only for the "
                "written part, none for the rest, silently. Drop {how} (a plain `.clone()` keeps the history for "
                "every part).",
                how=event.how, write=event.kept_in_part, where=where),
            certain=event.certain,
            related=[(event.kept_in_part, "writes part of the copy with values that keep the history"),
                     (sink.node, "the backward that gets no gradient through the other part" if sink.kind == "backward"
                      else "returns the copy: the backward through it gets no gradient through the other part")],
            data={"cut": True, "kept_in_part": True},
        )
        return
    if event.starved is None:
        return
    read = event.starved
    consequence = (
        "so {what} on {read} finds those gradients None (those parameters never learn). Drop {how} if the gradient "
        "should flow; if the cut is meant, leave those parameters out of the optimizer." if read.updates else
        "so {what} on {read} is None, on parameters the optimizer built on {held} holds to train. Drop {how} if "
        "that gradient should flow; if the cut is meant, leave those parameters out of the optimizer."
        if read.held_by is not None else
        "so {what} on {read} is None. Drop {how} if that gradient should flow.")
    yield Finding(
        "GG103",
        event.node,
        Message.format(
            "{how} cuts the graph here: the backward on {sink} gets no gradient to what this value was computed "
            "from, and no other backward reaches it, " + consequence,
            how=event.how, sink=event.reached.node, what=read.what, read=read.node, held=read.held_by),
        certain=event.certain,
        related=[(event.reached.node, "the backward that gets no gradient through the cut"),
                 (read.node, "uses the gradients that never arrive"),
                 *([(read.held_by, "the optimizer that holds those parameters")] if read.held_by is not None else [])],
        data=_cut_data(event),
    )


def _cut_data(event: GraphBreak) -> dict:
    return {"cut": True, **({"switched_off": event.switched_off} if event.switched_off is not None else {})}


def _check_grad_off_term(event):
    """A term of a loss computed only from values made with grad mode off: reported where grad mode on first reads
    them, only when what they were computed from includes parameters an update uses that no backward reaches."""
    read = event.starved
    if event.dead_in is None or read is None or event.reached is None:
        return
    op, switch = event.grad_off
    uses = ("{what} on {read} then finds their gradients None (they never learn)" if read.updates else
            "{what} on {read} finds their gradients None")
    yield Finding(
        "GG103",
        event.node,
        Message.format(
            "This value was computed on {op} with grad mode off (turned off on {switch}), so it has no graph, and "
            "the loss "
            "the backward on {sink} runs from adds a term computed only from it and other values without a graph: "
            "that term changes no gradient. Parameters it was computed from get no gradient from any backward, "
            "and " + uses + ". Recompute the value with grad mode on for the loss (or drop the term if it is "
            "not meant to train).",
            op=op, switch=switch, sink=event.dead_in, what=read.what, read=read.node),
        certain=event.certain,
        related=[(op, "computed here with grad mode off"),
                 (event.dead_in, "the backward that gets nothing from this term"),
                 (read.node, "uses the gradients that never arrive")],
        data={"cut": True, "grad_off": True},
    )


# ---- The fix --------------------------------------------------------------------------------------
# Each fix keeps the tensor the cut or the rebuild dropped; the first that applies is offered.
#
# - **a cut** -- a `.detach()`/`.data` that starves parameters the optimizer updates is dropped; a name rebound
#   with grad mode off (``pred = ema(pred)`` under ``no_grad``) is computed in ``torch.enable_grad()``.  Safe.
# - **an unreturned loss** -- ``return loss`` ends a ``training_step`` that returned nothing, ``loss`` the last
#   tensor requiring grad the run saw it bind on every path.  Unsafe: which tensor is the loss is the author's.
# - **a replaced parameter** -- ``q.scale = nn.Parameter(v)`` after the optimizer took the old one is
#   ``q.scale.copy_(v)`` under ``torch.no_grad()``.  Unsafe: the values take the old parameter's shape and dtype.
#   A module replaced just after the optimizer was built (by the assignment, a call that leads to it, or the loop
#   or ``if`` it is in) has the optimizer built after that statement.  Unsafe: it no longer holds the old one's.
# - **numbers in arithmetic** -- ``torch.tensor([a, b])`` is ``torch.stack([a, b])``; ``t.item()``/``float(t)``
#   as an operand, summed by ``sum(...)`` of a generator, or bound to a name used only in arithmetic is ``t``
#   (unsafe when the name has other uses: it then holds a tensor there too).
# - **numbers appended to a list** -- ``values.append(v.item())`` whose list is made a tensor again is
#   ``values.append(v)``, and that rebuild, when it is ``torch.tensor(values)`` itself, ``torch.stack(values)``
#   (in another function too, where the run saw it read that very list).  Unsafe: the list holds tensors for
#   every reader.
# - **a copy of one tensor** -- ``torch.tensor(t)`` is ``t.clone().detach()`` (torch's own words), so
#   ``t.clone()`` is the same copy with its graph; with ``dtype=``/``device=`` it is ``t.to(..., copy=True)``, and
#   ``x.new_tensor(t)`` is ``t.to(x, copy=True)`` (``x``'s dtype and device).  Safe.
# - **a list of tensors** -- ``torch.tensor(parts)``, where ``parts`` is only ever a list, is ``torch.stack(parts)``;
#   so is any list or comprehension the run knows holds only tensors (``torch.tensor(self.log_probs)``; unsafe when
#   some are results of code it cannot see into), unless it is read through a parameter (other callers' lists).
# - **a number or list read out of a tensor** -- ``torch.tensor(float(loss), requires_grad=True)`` and
#   ``torch.tensor(t.tolist())`` become the tensor itself, and ``torch.tensor(sum(l.item() for l in losses))``
#   the sum of the tensors.  Unsafe: the result keeps the tensor's dtype, shape and device where the rebuild made
#   a fresh CPU leaf of the default dtype.
# - **a NumPy round trip** -- ``torch.from_numpy(np.clip(t.detach().numpy(), a, b))`` is computed with the torch
#   twins of the NumPy functions (``torch.clamp(t, a, b)``; ``np.take(a, i, axis=1)`` is ``a[:, i]``), a name
#   bound to such an array included when it is read only in such rebuilds (each of them rewritten too); ``np.mean([l.item() for l in losses])`` is ``torch.stack([l for l in losses]).mean()``, and
#   ``np.sum(t, keepdims=True)`` names every dim of ``t``; ``np.var``/``np.std`` spell NumPy's ``ddof=0`` as
#   ``correction=0``, an array's ``.mean()``/``.sum()``/``.var()``/``.std()``/``.reshape()`` is the tensor's,
#   ``np.einsum`` takes a module's float32 constant as ``torch.from_numpy(M).to(a)``, a legacy
#   ``torch.FloatTensor(arr)`` is ``.float()``, and a name the rebuild rebinds (``v = torch.FloatTensor(v)``) is
#   translated at the binding just before it.  Unsafe: torch's dtype promotion and rounding may differ from
#   NumPy's.

def fix(ctx: FixContext, finding: Finding) -> Fix:
    """Keep the tensors: `torch.stack` for `torch.tensor([...])`, the tensor for `.item()`/`float()` in arithmetic,
    in `sum(...)` of a generator, or bound to a name used in arithmetic (unsafe when the name has other uses);
    a copy of one tensor made with its graph, a list of tensors stacked, a NumPy round trip in torch ops;
    drop a `.detach()`/`.data` (or set a new `nn.Parameter(t)`'s `t` itself) that starves parameters the optimizer
    updates; grad mode on where a loss is computed with it off (``_grad_on``)."""
    grad_off = finding.data.get("grad_off")
    if isinstance(grad_off, GradOffBackward):
        return _grad_on(ctx, grad_off)
    if grad_off:
        return None
    unfreeze = finding.data.get("guarded_unfreeze")
    if isinstance(unfreeze, GuardedUnfreeze):
        return _drop_guard(ctx, unfreeze)
    refused = finding.data.get("numpy_refused")
    if isinstance(refused, NumpyRefused):
        return _reduce_in_torch(ctx, refused)
    if finding.data.get("dropped_output"):
        return None  # returning the value is the fix, but whether it should keep `.data`'s cut is the author's
    if finding.data.get("unreturned") is not None:
        return _return_the_loss(ctx, finding)
    if finding.data.get("built_before") is not None:
        return _build_after_replacement(ctx, finding.data["built_before"])
    if finding.data.get("copy_trained") is not None:
        return _optimizer_for_the_copy(ctx, finding.data["copy_trained"])
    if finding.data.get("detach"):
        return _detach_out_of_place(ctx, finding)
    if finding.data.get("cut_again"):
        return None  # the values are cut again further on: dropping this cut alone keeps them cut
    if finding.data.get("switched_off") is not None:
        return _grad_on_for_statement(ctx, finding)
    if finding.data.get("cut"):
        return _let_gradient_through(ctx, finding)
    if finding.data.get("flag"):
        return _set_on_parameters(ctx, finding)
    if finding.data.get("replaced_parameter"):
        return _write_into_parameter(ctx, finding)
    if finding.data.get("rebuilt_at") is not None:  # reported at the read: the rewrite is of the rebuild
        appended = _append_the_tensor(ctx, finding)
        if appended is not None:
            return appended
        finding = dataclasses.replace(finding, node=finding.data["rebuilt_at"])
    try:
        return _keep_tensors_in_arithmetic(ctx, finding)
    except CannotFix:
        return _keep_rebuilt_tensor(ctx, finding)


_FACTORIES = tuple(f"torch.{name}" for name in sorted(GRAPH_REBUILDING_FACTORIES))
_LEGACY = {f"torch.{name}": cast for name, cast in LEGACY_FLOAT_CONSTRUCTORS.items()}
_LIKE = ("dtype", "device")  # keywords a copy keeps as they are

_REDUCTIONS = ("mean", "sum")  # NumPy functions that reduce every element when given no axis
_NAME_CHAIN = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")  # read twice, it is the same tensor
def _detach_out_of_place(ctx: FixContext, finding: Finding) -> Fix:
    """``x.detach_()`` as a statement becomes ``x = x.detach()``: the name holds a detached copy, what was built
    from the old value keeps its graph.  Every other variable of the function bound to the same tensor object that
    the code reads after the write is rebound with it (``x = alias = alias.detach()``, ``x = ts[0].detach()``):
    who holds it is what the run tells (``Moment.holders``, at every run of the write).  Refused where a rebinding
    cannot stand for the in-place detach: a list, dict or object holding it that is read later, another tensor
    over the same memory that may be the same object (a join) read later, a tensor standing for several (a loop
    over a list of them), a caller that passed it or a variable of another frame, something it was handed to that
    the analysis cannot see into (views and bases under other names do not matter: detaching never meant to cut
    them).  Safe for a view (torch refused the original outright); unsafe for a saved tensor, whose earlier uses
    keep their whole history (no truncation happens there)."""
    call = finding.node
    stmt = ctx.statement_of(call)
    if not (isinstance(stmt, ast.Expr) and stmt.value is call and isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute) and not call.args and not call.keywords):
        raise CannotFix("the `.detach_()` is not a statement of its own")
    receiver = call.func.value
    mutation = finding.mutation
    moment = mutation.moment if mutation is not None else None
    if moment is None or moment.holders is None:
        raise CannotFix("the run does not tell who else holds the tensor here")
    if isinstance(receiver, ast.Name) and (receiver.id, "same") not in moment.held():
        raise CannotFix(f"`{receiver.id}` is not a variable of this function holding the tensor")
    if moment.escaped:
        raise CannotFix("the tensor was handed to code the analysis cannot see into, which may keep it")
    if isinstance(receiver, ast.Name) and receiver.id in moment.callers_pass() and mutation.frames:
        return _detach_through_callers(ctx, stmt, receiver.id, moment, mutation)
    if mutation.frames:
        raise CannotFix("the run does not tell who else holds the tensor here")
    root = mutation.target.root()
    if isinstance(root.origin, ast.arg) or root.param or root.assumed or moment.held_outside():
        raise CannotFix("the caller or another function's variable holds the tensor too")
    if ctx.function_of(stmt) is None:
        raise CannotFix("a module's variable: its functions may read it")
    rebound = _detached_names(moment, receiver=receiver.id if isinstance(receiver, ast.Name) else None)
    if not rebound:
        raise CannotFix("no variable reads the detached tensor after the write")
    edit, title = _rebinding_edit(ctx, stmt, rebound, ctx.source(receiver), mutation)
    return Fix(title, mutation.refused_view, (edit,))


def _rebinding_edit(ctx: FixContext, stmt: ast.stmt, rebound: list[str], detached: str,
                    mutation: Mutation) -> tuple[TextEdit, str]:
    """The statement ``stmt`` (``x.detach_()``) replaced by ``a = b = x.detach()`` for the ``rebound`` names, and the
    fix's title."""
    if len(rebound) > 1 and mutation.target.group:
        raise CannotFix("the tensor stands for several (a loop over them): one rebinding cannot detach each")
    ctx.require_own_lines(stmt)
    line, column, end_line, end_column = ctx.char_range(stmt)
    text = f"{' = '.join(rebound)} = {detached}.detach()"
    title = f"Detach out of place: `{short(text)}`"
    if not mutation.refused_view:
        title += " (unsafe: what was computed from it before keeps its whole history)"
    return TextEdit(line, column + 1, end_line, end_column + 1, text), title


def _detach_through_callers(ctx: FixContext, stmt: ast.stmt, param: str, moment: Moment, mutation: Mutation) -> Fix:
    """``x.detach_()`` on a helper's parameter ``x``: the helper rebinds ``x`` (and the other variables of its frame
    read after it that hold the tensor, ``_detached_names``) to a detached copy and returns it; each call rebinds
    the name it passed (``through_callers``, which checks what else each caller holds it under).  Refused when a
    variable of a frame above the helper's caller holds it (a caller's caller), or of an enclosing function or the
    module, as the runs show: the rebinding reaches one caller only."""
    own = len(moment.frames) - 1
    if any(frame is None or frame != own - 1 for _, frame in moment.held_outside()):
        raise CannotFix("a variable of a frame above the helper's caller holds the tensor too")
    edit, title = _rebinding_edit(ctx, stmt, _detached_names(moment, receiver=param), param, mutation)

    def check(call: ast.Call, name: str) -> Report:  # the caller's variables read after the call, as for the helper
        found = moment.through(call)
        if found is None or _detached_names(*found, receiver=name) != [name]:
            raise CannotFix(f"at the call on line {call.lineno}: no run went through it, or another variable holds "
                            "the tensor and is read later")
        return Report(name)

    return through_callers(ctx, (edit,), stmt, param, title, mutation.refused_view, moment=moment, check=check)


def _detached_names(moment: Moment, depth: int = -1, receiver: str | None = None) -> list[str]:
    """The variables a rebinding instead of ``.detach_()`` rebinds: ``receiver`` (the name the write goes through,
    None for an element) and every other variable of the write's frame bound to the same tensor object that is
    read after it (values or metadata: ``.requires_grad`` changes too); CannotFix when a variable read after holds
    it otherwise (a list, dict or object; a join), or holds it at one run of the write and not at another, or when
    a variable left as it is may be read by another function later (a nested function reading it as a free
    variable).  ``depth``: the frame whose variables these are (a caller's: what they held at its call)."""
    frame = moment.frames[depth]

    def read_after(run: Moment, name: str) -> bool:
        return run.log.value_read(frame, name, run.position) or run.log.metadata_read(frame, name, run.position)

    runs = moment.runs()
    same: list[str] = [receiver] if receiver is not None else []
    for run in runs:
        for name, how in run.held(depth):
            if name == receiver or how == "view":
                continue
            if not read_after(run, name):
                if run.log.read_in_other_frames(frame, name, run.position):
                    raise CannotFix(f"`{name}` holds it and a function it runs may read it later")
                continue
            if how != "same":
                kind = "holds it" if how == "holder" else "may be the same tensor"
                raise CannotFix(f"`{name}` {kind} and is read later: rebinding names would leave it undetached")
            if name not in same:
                same.append(name)
    if any((name, "same") not in run.held(depth) for run in runs for name in same):
        raise CannotFix("a variable holds the tensor at one run of the write and not at another")
    return same


_TO_NUMPY = ("detach", "cpu")  # methods on the way to `.numpy()` that change neither values nor graph here


def _keep_rebuilt_tensor(ctx: FixContext, finding: Finding) -> Fix:
    """The first rewrite above that applies to the finding's statement; CannotFix when none does."""
    torch = ctx.torch_name()
    if torch is None:
        raise CannotFix("the file does not import torch as a module")
    if (finding.data or {}).get("of_tensor") and isinstance(finding.node, ast.Call):
        _require_not_rebuilt_again(ctx, finding.node)
        return _copy_of_tensor(ctx, finding.node)
    listed = _list_of(finding) if isinstance(finding.node, ast.Call) else None
    if listed == "tensors":
        return _stack_the_list(ctx, finding.node, torch, safe=True)
    stmt = ctx.statement_of(finding.node)
    for call in calls(stmt):
        cast = _LEGACY.get(ctx.qual(call.func) or "")
        if cast is not None and len(call.args) == 1 and not call.keywords and _detached_by_variable(ctx, call) is call:
            # `torch.FloatTensor(arr)` copies the array into a float32 tensor: the translation cast alike.
            translated = NumpyTranslation(ctx, torch, call)
            text = translated.expr(call.args[0])
            if text is not None and (translated.numpy or translated.bindings):
                _require_not_rebuilt_again(ctx, call)
                return translated.fix(call, f"{_atom_text(text)}.{cast}()", {})
        if ctx.qual(call.func) not in _FACTORIES or len(call.args) != 1:
            continue
        outer = _detached_by_variable(ctx, call)
        if outer is call:
            _require_not_rebuilt_again(ctx, call)
        keywords = {k.arg: k.value for k in call.keywords}
        if None in keywords or set(keywords) - {*_LIKE, "requires_grad"}:
            continue
        arg = call.args[0]
        if outer is not call:  # only the round trip's rewrite replaces the wrapper too
            translated = NumpyTranslation(ctx, torch, call)
            text = translated.expr(arg)
            if text is not None and translated.numpy and not keywords and not translated.also:
                return translated.fix(outer, text, keywords)
            raise CannotFix("the rebuilt tensor is detached again by the `Variable` around it")
        if isinstance(arg, ast.Name) and ctx.qual(call.func) == "torch.tensor" and not keywords \
                and listed != "mixed" and _only_ever_a_list(ctx, arg):
            new = parse_expr(_stacked(ctx, call, torch, arg.id))
            return Rewrite(ctx).replace_node(ctx.cst(call), new).fix(
                f"Keep the graph: `{torch}.stack({arg.id})` instead of `{ctx.source(call)}`", safe=True)
        number = _read_out_of(arg)
        if number is not None and ctx.qual(call.func) == "torch.tensor":
            return _the_tensor_itself(ctx, call, number, keywords)
        summed = _sum_of_tensors(ctx, arg)
        if summed is not None and ctx.qual(call.func) == "torch.tensor":
            return _the_tensor_itself(ctx, call, arg, keywords, summed)
        translated = NumpyTranslation(ctx, torch, call)
        text = translated.expr(arg)
        if text is not None and (translated.numpy or translated.bindings):
            return translated.fix(call, text, keywords)
    if listed == "computed":
        return _stack_the_list(ctx, finding.node, torch, safe=False)
    raise CannotFix("no tensor-keeping rewrite for this rebuild")


def _list_of(finding: Finding) -> str | None:
    """What the rebuilt list holds (``GraphBreak.of_list``) over every analysis of the line: "mixed" when one saw
    an element that is not a tensor, else "computed" when one saw results of code it cannot see into, else
    "tensors" when one knew the elements; None when none knew them."""
    if (finding.data or {}).get("rebuilt_at") is not None:
        return None
    seen = [(f.data or {}).get("of_list") for f in (finding, *finding.twins)]
    return next((kind for kind in ("mixed", "computed", "tensors") if kind in seen), None)


def _stack_the_list(ctx: FixContext, call: ast.Call, torch: str, safe: bool) -> Fix:
    """``torch.tensor(parts)``, ``parts`` a list of one-element tensors, is ``torch.stack(parts).flatten()`` with
    their graph (see ``_stacked``); ``dtype=``/``device=`` become a ``.to(...)`` of the stacked tensor.  The legacy
    ``torch.Tensor(parts)`` too, unsafe: it makes a CPU tensor of the default dtype, the stack keeps theirs."""
    legacy = ctx.qual(call.func) == "torch.Tensor" and not call.keywords
    if not legacy and (ctx.qual(call.func) not in _FACTORIES or ctx.qual(call.func) == "torch.from_numpy") \
            or len(call.args) != 1:
        raise CannotFix("not a torch.tensor/as_tensor/Tensor of one list")
    _require_not_rebuilt_again(ctx, call)
    keywords = {k.arg: k.value for k in call.keywords}
    if None in keywords or set(keywords) - {*_LIKE, "requires_grad"}:
        raise CannotFix("keywords the stacked tensor does not keep as they are")
    flag = keywords.pop("requires_grad", None)
    if flag is not None and not (isinstance(flag, ast.Constant) and flag.value is True):
        raise CannotFix("requires_grad is not plainly True")
    arg = call.args[0]
    _require_not_a_callers_list(ctx, arg)
    text = _stacked(ctx, call, torch, ctx.source(arg))
    if keywords:
        text += f".to({', '.join(f'{k}={ctx.source(v)}' for k, v in keywords.items())})"
    title = f"Keep the graph: `{short(text)}` instead of `{short(ctx.source(call))}`"
    if not safe:
        title += " (unsafe: some elements are results of code the analysis cannot see into, maybe not tensors)"
    elif legacy:
        title += " (unsafe: it keeps the elements' dtype and device, where `torch.Tensor` makes a CPU tensor of the " \
                 "default dtype)"
    return Rewrite(ctx).replace_node(ctx.cst(call), parse_expr(text)).fix(title, safe=safe and not legacy)


def _require_not_a_callers_list(ctx: FixContext, arg: ast.expr) -> None:
    """CannotFix when the list is read through a parameter (other than a method's own object): the run knows the
    elements one caller passed, and other callers may pass numbers, which ``torch.stack`` refuses."""
    fn = ctx.function_of(arg)
    if fn is None:
        return
    params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs, fn.args.vararg,
                               fn.args.kwarg] if a]
    own = params[:1] if isinstance(ctx.parents.get(fn), ast.ClassDef) else []
    read = names_read(arg)
    if read & (set(params) - set(own)):
        raise CannotFix("the list is read through a parameter: other callers may pass numbers")


def _detached_by_variable(ctx: FixContext, call: ast.Call) -> ast.Call:
    """The legacy ``Variable(call)`` around ``call``, given nothing else: it hands on a tensor detached from what
    it is given, so a rewrite that keeps the graph replaces it too; else ``call`` itself."""
    parent = ctx.parents.get(call)
    if isinstance(parent, ast.Call) and len(parent.args) == 1 and parent.args[0] is call and not parent.keywords \
            and ctx.qual(parent.func) == "torch.autograd.Variable":
        return parent
    return call


def _require_not_rebuilt_again(ctx: FixContext, call: ast.Call) -> None:
    """CannotFix when the rebuilt tensor goes straight into another rebuild (``Variable(torch.tensor(...),
    requires_grad=True)``): keeping the tensor here would still lose its graph there."""
    parent = ctx.parents.get(call)
    if isinstance(parent, ast.keyword):
        parent = ctx.parents.get(parent)
    if isinstance(parent, ast.Call) and call is not parent.func and (
            ctx.qual(parent.func) in (*_FACTORIES, "torch.autograd.Variable", "torch.nn.Parameter")
            or isinstance(parent.func, ast.Attribute) and parent.func.attr in ("new_tensor", "Variable")):
        raise CannotFix("the rebuilt tensor is rebuilt again by the call around it")


def _copy_of_tensor(ctx: FixContext, call: ast.Call) -> Fix:
    """``torch.tensor(t, dtype=d)`` -> ``t.to(dtype=d, copy=True)``; ``x.new_tensor(t)`` -> ``t.to(x, copy=True)``."""
    q = ctx.qual(call.func)
    keywords = {k.arg: k.value for k in call.keywords}
    if None in keywords or set(keywords) - set(_LIKE):
        raise CannotFix("keywords a copy does not keep as they are")
    kw = ", ".join(f"{k}={ctx.source(v)}" for k, v in keywords.items())
    if q == "torch.tensor" and len(call.args) == 1:
        source = call.args[0]
        new = f"{_atom(ctx, source)}.to({kw}, copy=True)" if kw else f"{_atom(ctx, source)}.clone()"
    elif isinstance(call.func, ast.Attribute) and call.func.attr == "new_tensor" and len(call.args) == 1 \
            and is_dotted(call.func.value):
        source, like = call.args[0], ctx.source(call.func.value)
        if kw:
            defaults = "".join(f", {k}={like}.{k}" for k in _LIKE if k not in keywords)
            new = f"{_atom(ctx, source)}.to({kw}{defaults}, copy=True)"
        else:
            new = f"{_atom(ctx, source)}.to({like}, copy=True)"
    else:
        raise CannotFix("not a one-tensor copy")
    rw = Rewrite(ctx).replace_node(ctx.cst(call), parse_expr(new))
    return rw.fix(f"Keep the graph: `{new}` copies `{ctx.source(source)}` with its gradient", safe=True)


def _the_tensor_itself(ctx: FixContext, call: ast.Call, tensor: ast.expr, keywords: dict,
                       text: str | None = None) -> Fix:
    """``call`` replaced by the tensor its number was read out of (``tensor``, or ``text`` when that tensor is
    spelled differently from any node: the sum of the tensors a ``sum(...)`` of their numbers added)."""
    if any(k != "requires_grad" for k in keywords):
        raise CannotFix("a dtype or device the tensor may not have")
    if "requires_grad" in keywords and not (isinstance(keywords["requires_grad"], ast.Constant)
                                            and keywords["requires_grad"].value is True):
        raise CannotFix("requires_grad is not plainly True")
    text = text or _atom(ctx, tensor)
    stmt = ctx.statement_of(call)
    if isinstance(stmt, ast.Assign) and stmt.value is call and len(stmt.targets) == 1 \
            and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == text:
        # ``loss = torch.tensor(float(loss), requires_grad=True)``: ``loss = loss`` would be left; drop the line
        return Rewrite(ctx).remove_statement(stmt).fix(
            f"Keep the graph: delete `{short(ctx.source(stmt))}`, so `{text}` stays the tensor with its graph "
            "(unsafe: it keeps that tensor's dtype, shape and device, and is not a new leaf whose `.grad` torch "
            "fills)", safe=False)
    rw = Rewrite(ctx).replace_node(ctx.cst(call), parse_expr(text))
    return rw.fix(f"Keep the graph: use `{short(text)}` instead of `{short(ctx.source(call))}` (unsafe: the "
                  "result is that tensor, with its dtype, shape and device, not a new leaf whose `.grad` torch fills)",
                  safe=False)


def _sum_of_tensors(ctx: FixContext, node: ast.expr) -> str | None:
    """``sum(l.item() for l in losses)`` (no start value): ``sum(l for l in losses)``, the same number kept as a
    tensor with its graph; None for anything else."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "sum"
            and "sum" not in ctx.imports and len(node.args) == 1 and not node.keywords):
        return None
    return _tensors_read_out(ctx, node.args[0], node)


def _tensors_read_out(ctx: FixContext, node: ast.expr, around: ast.expr | None = None) -> str | None:
    """A list or generator of numbers each read out of a tensor (``[l.item() for l in losses]``,
    ``(float(t) for t in parts)``, ``[a.item(), b.item()]``), spelled with the tensors themselves
    (``[l for l in losses]``); None when an element is not such a number.  ``around`` (an expression holding
    ``node``) is spelled instead, with the same change."""
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        reads = [node.elt]
    elif isinstance(node, ast.List) and node.elts:
        reads = list(node.elts)
    else:
        return None
    spans = []
    for read in reads:
        tensor = _read_out_of(read)
        if tensor is None or (isinstance(read.func, ast.Attribute) and read.func.attr == "tolist") \
                or isinstance(read.func, ast.Name) and read.func.id in ctx.imports:
            return None
        spans.append((_span(ctx, read), _atom(ctx, tensor)))
    start, end = _span(ctx, around or node)
    text = ctx.text[start:end]
    for (a, b), tensor in reversed(spans):
        text = text[:a - start] + tensor + text[b - start:]
    return text


def _span(ctx: FixContext, node: ast.AST) -> tuple[int, int]:
    """Where ``node`` is in the file's text, as offsets."""
    line, col, end_line, end_col = ctx.char_range(node)
    return ctx.line_starts[line - 1] + col, ctx.line_starts[end_line - 1] + end_col


def _read_out_of(arg: ast.expr) -> ast.expr | None:
    """``float(t)``, ``t.item()``, ``t.tolist()``: the tensor ``t`` the number or list is read out of."""
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "float" \
            and len(arg.args) == 1 and not arg.keywords:
        return arg.args[0]
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr in ("item", "tolist") \
            and not arg.args and not arg.keywords:
        return arg.func.value
    return None


def _stacked(ctx: FixContext, call: ast.Call, torch: str, tensors: str) -> str:
    """``torch.tensor(tensors)`` with its graph.  torch.tensor makes one number of each one-element tensor, so its
    result is 1-D whatever their shape; ``torch.stack`` keeps their shape (``(n, 1)`` for ``(1,)`` critic values,
    which then broadcast against ``(n,)`` returns into ``(n, n)``).  ``.flatten()`` gives torch.tensor's shape,
    unless the result is reduced whole at once (``.sum()``, ``.mean()``), where the shape cannot matter."""
    stacked = f"{torch}.stack({tensors})"
    parent = ctx.parents.get(call)
    outer = ctx.parents.get(parent) if isinstance(parent, ast.Attribute) else None
    if isinstance(outer, ast.Call) and outer.func is parent and parent.attr in ("sum", "mean") \
            and not outer.args and not outer.keywords:
        return stacked
    return f"{stacked}.flatten()"


def _only_ever_a_list(ctx: FixContext, name: ast.Name) -> bool:
    """Whether every binding of ``name`` in its function is a list display or comprehension, and the name is
    no parameter and not declared global or nonlocal (so it holds a list wherever it is read)."""
    scope = ctx.scope_of(name)
    if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    args = scope.args
    if any(a.arg == name.id for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a):
        return False
    names = ctx.names_in(scope)
    if name.id in names.declared:
        return False
    bound = 0
    for node in names.of(name.id):
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            parent = ctx.parents.get(node)
            if not (isinstance(parent, ast.Assign) and parent.targets == [node]
                    and isinstance(parent.value, (ast.List, ast.ListComp))):
                return False
            bound += 1
    return bound > 0


def _atom_text(text: str) -> str:
    """A translated expression as an operand of indexing: a name chain as it is, else parenthesised."""
    return text if _NAME_CHAIN.fullmatch(text) else f"({text})"


def _atom(ctx: FixContext, node: ast.expr) -> str:
    text = ctx.source(node)
    return text if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) else f"({text})"


class NumpyTranslation:
    """An expression computed in NumPy from tensors, spelled with torch ops: ``t.detach().numpy()`` is ``t``,
    ``np.clip`` is ``torch.clamp``, arithmetic with numbers stays.  A name bound (once, in the same function,
    before) to such an array and read nowhere else is translated at its binding too."""

    def __init__(self, ctx: FixContext, torch: str, rebuilt: ast.Call):
        self.ctx, self.torch, self.rebuilt = ctx, torch, rebuilt
        self.names: set[str] = set()  # names whose binding is translated (with their other reads)
        self.also: list[str] = []  # those names read in other rebuilds, which then keep the graph too
        self.numpy = False  # a `.numpy()` was seen: the expression starts from a tensor
        self.bindings: list[tuple[ast.expr, str]] = []  # (a binding's value, its torch spelling)

    def expr(self, node: ast.expr) -> str | None:
        ctx = self.ctx
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return ctx.source(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self.expr(node.operand)
            return None if inner is None else f"{ctx.source(node)[:1]}({inner})"
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)):
            left, right = self.expr(node.left), self.expr(node.right)
            if left is None or right is None:
                return None
            op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}[type(node.op)]
            return f"({left} {op} {right})"
        if isinstance(node, ast.Name):
            return self._bound(node)
        if isinstance(node, ast.Subscript) and not any(isinstance(n, ast.Slice) and n.step is not None
                                                       for n in every_node(node.slice)):
            # Indexing (with numbers, slices, or index arrays NumPy computed) picks the same elements of a tensor;
            # torch refuses only a negative step.
            inner = self.expr(node.value)
            return None if inner is None else f"{_atom_text(inner)}[{ctx.source(node.slice)}]"
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "numpy" and not node.args and not node.keywords:
            source = func.value
            while isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute) \
                    and source.func.attr in _TO_NUMPY and not source.args and not source.keywords \
                    or isinstance(source, ast.Attribute) and source.attr == "data":  # `.data` cuts what we keep
                source = source.value if isinstance(source, ast.Attribute) else source.func.value
            self.numpy = True
            return _atom(ctx, source)
        q = ctx.qual(func) or ""
        converted = self._converter_argument(node)
        if converted is not None:
            self.numpy = True
            return _atom(ctx, converted)
        if not q.startswith("numpy."):
            return self._method(node)
        name = q[len("numpy."):]
        if name == "take":
            return self._take(node)
        if name in NUMPY_SUBSCRIPT_TWINS:
            return self._subscripts(node, NUMPY_SUBSCRIPT_TWINS[name])
        twin = NUMPY_TWINS.get(name)
        if twin is None or any(k.arg is None or k.arg not in twin[1] for k in node.keywords):
            return None
        if name in _REDUCTIONS and len(node.args) == 1 and not node.keywords:
            # `np.mean([l.item() for l in losses])`: the numbers of tensors, stacked, reduce to the same value.
            tensors = _tensors_read_out(ctx, node.args[0])
            if tensors is not None:
                self.numpy = True
                return f"{self.torch}.stack({tensors}).{twin[0]}()"
        args = [self.expr(node.args[0]) if node.args else None, *(ctx.source(a) for a in node.args[1:])]
        if not args or args[0] is None or any(a is None for a in args):
            return None
        if any(not number_written_out(a) for a in node.args[1:]):
            return None  # array bounds or counts: torch wants tensors or ints where NumPy broadcasts
        given = {k.arg for k in node.keywords}
        if "keepdims" in given and "axis" not in given:
            # NumPy keeps every dimension; torch's keepdim needs the dims, named here from the tensor itself.
            keep = next(k.value for k in node.keywords if k.arg == "keepdims")
            if name not in _REDUCTIONS or len(node.keywords) != 1 or len(node.args) != 1 \
                    or not (isinstance(keep, ast.Constant) and isinstance(keep.value, bool)) \
                    or not _NAME_CHAIN.fullmatch(args[0]):
                return None
            dims = f", dim=tuple(range({args[0]}.dim())), keepdim=True" if keep.value else ""
            return f"{self.torch}.{twin[0]}({args[0]}{dims})"
        if any(k.arg == "axis" and not number_written_out(k.value) and not (
                isinstance(k.value, ast.Tuple) and all(number_written_out(e) for e in k.value.elts)) for k in node.keywords):
            return None  # `axis=None` or a computed axis
        if not _plain_keywords(node.keywords):
            return None
        keywords = _twin_keywords(ctx, name, twin[1], node.keywords)
        return f"{self.torch}.{twin[0]}({', '.join([*args, *keywords])})"

    def _method(self, call: ast.Call) -> str | None:
        """``arr.mean(axis=0)`` / ``arr.reshape(1, n)`` on an array translated here: the tensor method of the same
        meaning (``NUMPY_ARRAY_METHOD_TWINS``), a reduction's axis a number or a tuple of numbers, ``keepdims``
        only with one, NumPy's defaults spelled (``correction=0``)."""
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr not in NUMPY_ARRAY_METHOD_TWINS \
                or any(isinstance(a, ast.Starred) for a in call.args):
            return None
        method, names = NUMPY_ARRAY_METHOD_TWINS[func.attr]
        if any(k.arg is None or k.arg not in names for k in call.keywords):
            return None
        if names:  # a reduction: at most the axis by position, numbers only
            given = {k.arg for k in call.keywords}
            if len(call.args) > 1 or not _plain_keywords(call.keywords) or any(
                    not _axis(a) for a in call.args) or ("keepdims" in given and not call.args and "axis" not in given):
                return None
        elif any(isinstance(n, ast.Constant) and not isinstance(n.value, int) for a in call.args for n in every_node(a)):
            return None  # a reshape's shape is numbers (an `order=`-like string is NumPy's alone)
        receiver = self.expr(func.value)
        if receiver is None:
            return None
        args = [self.ctx.source(a) for a in call.args]
        keywords = _twin_keywords(self.ctx, func.attr, names, call.keywords) if names else []
        return f"{_atom_text(receiver)}.{method}({', '.join([*args, *keywords])})"

    def _subscripts(self, call: ast.Call, twin: str) -> str | None:
        """``np.einsum("cd,bdhw->bchw", M, a)``: torch's twin on the translated operands.  An operand that is a
        module's float32 NumPy constant (``_constant_array``) is ``torch.from_numpy(M).to(a)`` on the first
        translated name: NumPy promotes float32 to the other operand's float32 or float64, exactly so (torch
        wants one dtype)."""
        if call.keywords or len(call.args) < 2 or not (isinstance(call.args[0], ast.Constant)
                                                       and isinstance(call.args[0].value, str)):
            return None
        spelled = [None if isinstance(a, ast.Starred) else self.expr(a) for a in call.args[1:]]
        anchor = next((t for t in spelled if t is not None and _NAME_CHAIN.fullmatch(t)), None)
        for k, arg in enumerate(call.args[1:]):
            if spelled[k] is None and anchor is not None and self._constant_array(arg):
                spelled[k] = f"{self.torch}.from_numpy({arg.id}).to({anchor})"
        if None in spelled:
            return None
        return f"{self.torch}.{twin}({', '.join([self.ctx.source(call.args[0]), *spelled])})"

    def _constant_array(self, node: ast.expr) -> bool:
        """A module's name bound once, at its top level, to ``np.array(..., dtype=np.float32)`` (or
        ``np.asarray``), never declared global nor bound in a function: every read is that float32 array."""
        ctx = self.ctx
        if not isinstance(node, ast.Name):
            return False
        names = ctx.names_in(ctx.tree)
        stores = [n for n in names.of(node.id) if not isinstance(n.ctx, ast.Load)]
        if node.id in names.declared or node.id in names.definitions or len(stores) != 1:
            return False
        assign = ctx.parents.get(stores[0])
        if not (isinstance(assign, ast.Assign) and assign.targets == stores and ctx.parents.get(assign) is ctx.tree
                and isinstance(assign.value, ast.Call) and ctx.qual(assign.value.func) in ("numpy.array", "numpy.asarray")):
            return False
        dtype = next((k.value for k in assign.value.keywords if k.arg == "dtype"), None)
        return dtype is not None and (ctx.qual(dtype) == "numpy.float32"
                                      or isinstance(dtype, ast.Constant) and dtype.value == "float32")

    def _converter_argument(self, call: ast.Call) -> ast.expr | None:
        """``meter.to_numpy(t)`` where every function of the file with that name only returns its argument's
        ``.numpy()`` (``return t.detach().cpu().numpy()``): the tensor ``t``."""
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
        if name is None or len(call.args) != 1 or call.keywords or isinstance(call.args[0], ast.Starred):
            return None
        defs = self.ctx.names_in(self.ctx.tree).definitions.get(name, [])
        method = isinstance(call.func, ast.Attribute)
        if not defs or any(not _returns_numpy_of_argument(d, method) for d in defs) \
                or (not method and name in self.ctx.imports):
            return None
        return call.args[0]

    def _take(self, call: ast.Call) -> str | None:
        """``np.take(a, idx, axis=k)`` is ``a[:, ..., idx]`` (``k`` colons), indexed with the indices as a long
        tensor (NumPy casts booleans to 0 and 1 too, where torch would read a mask)."""
        args = list(call.args)
        axis = args.pop(2) if len(args) == 3 else next((k.value for k in call.keywords if k.arg == "axis"), None)
        if len(args) != 2 or any(k.arg != "axis" for k in call.keywords) or len(call.keywords) + len(call.args) != 3 \
                or not (isinstance(axis, ast.Constant) and type(axis.value) is int and axis.value >= 0):
            return None
        array = self.expr(args[0])
        if array is None or isinstance(args[1], ast.Starred):
            return None
        index = f"{self.torch}.as_tensor({self.ctx.source(args[1])}, dtype={self.torch}.long)"
        array = array if _NAME_CHAIN.fullmatch(array) else f"({array})"
        return f"{array}[{':, ' * axis.value}{index}]"

    def _bound(self, name: ast.Name) -> str | None:
        """The torch spelling of the one earlier binding of ``name`` in its function, when ``name`` is read only
        here or in other rebuilds (``torch.from_numpy(np.take(p, i, axis=1))``), each translated too (so the
        binding may hold a tensor instead of an array)."""
        ctx = self.ctx
        if name.id in self.names:
            return name.id
        scope = ctx.scope_of(name)
        if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        names = ctx.names_in(scope)
        uses = names.of(name.id)
        if name.id in names.declared or any(ctx.definitions_between(n, scope) for n in uses):
            return None  # declared global or nonlocal, or used by a nested function or class
        stores, loads = [], []
        for node in uses:
            (loads if isinstance(node.ctx, ast.Load) else stores).append(node)
        if name not in loads:
            return None
        if len(stores) == 1:
            assign = ctx.parents.get(stores[0])
            if not (isinstance(assign, ast.Assign) and assign.targets == [stores[0]]
                    and not ctx.loops_around(assign, scope) and name.id not in names.parameters
                    and all(_runs_before(ctx, assign, ctx.statement_of(n)) and not _repeated(ctx, n, scope)
                            for n in loads)):
                return None
        else:
            assign, loads = _rebound_right_after(ctx, name, stores, loads, scope)
            if assign is None:
                return None
        self.names.add(name.id)
        text = self.expr(assign.value)
        rebuilds = [self._rebuild_around(n) for n in loads if n is not name]
        if text is None or None in rebuilds:
            return None
        for rebuild in {id(r): r for r in rebuilds if r is not self.rebuilt}.values():
            spelled = self.expr(rebuild.args[0])
            if spelled is None:
                return None
            self.bindings.append((rebuild, spelled))
            self.also.append(name.id)
        self.bindings.append((assign.value, text))
        return name.id

    def _rebuild_around(self, read: ast.Name) -> ast.Call | None:
        """The innermost ``torch.from_numpy(...)`` (or other rebuild, no keywords) whose one argument holds
        ``read``: the array becomes a tensor there, so the tensor the binding then holds serves as well."""
        for node in self.ctx.ancestors(read):
            if isinstance(node, ast.stmt):
                return None
            if isinstance(node, ast.Call) and self.ctx.qual(node.func) in _FACTORIES and len(node.args) == 1 \
                    and not node.keywords and self.ctx.inside(read, node.args[0]):
                return node
        return None

    def fix(self, call: ast.Call, text: str, keywords: dict) -> Fix:
        ctx = self.ctx
        if set(keywords) - {"requires_grad"}:
            raise CannotFix("a dtype or device on the rebuilt array")
        rw = Rewrite(ctx).replace_node(ctx.cst(call), parse_expr(text))
        for value, spelled in self.bindings:
            rw.replace_node(ctx.cst(value), parse_expr(spelled))
        around = ctx.parents.get(call)
        made_leaf = "requires_grad" in keywords or (
            isinstance(around, ast.Attribute) and around.value is call and around.attr == "requires_grad_")
        leaf = ", and the result is not a new leaf whose `.grad` torch fills" if made_leaf else ""
        also = "".join(f", and the other rebuild{'s' * (self.also.count(name) > 1)} of `{name}` keep"
                       f"{'s' * (self.also.count(name) == 1)} the graph too" for name in dict.fromkeys(self.also))
        return rw.fix(f"Keep the graph: compute `{short(text)}` with torch instead of NumPy (unsafe: torch's dtype "
                      f"promotion and rounding may differ from NumPy's{leaf}{also})", safe=False)


def _rebound_right_after(ctx: FixContext, read: ast.Name, stores: list[ast.Name], loads: list[ast.Name],
                         scope: ast.AST) -> tuple[ast.Assign | None, list[ast.Name]]:
    """For a name bound more than once: the binding ``read`` reads (``var = np.var(...)``) and the reads of it,
    when the statement reading it rebinds the name itself (``var = torch.FloatTensor(var)``) and both are
    statements of one block with nothing between that binds the name or leaves the block early (so no other
    read, in a later iteration or after the block, sees that binding); none when not so."""
    then = ctx.statement_of(read)
    if not (isinstance(then, ast.Assign) and len(then.targets) == 1 and isinstance(then.targets[0], ast.Name)
            and then.targets[0].id == read.id) or any(isinstance(a, ast.Try) for a in ctx.ancestors(then)):
        return None, loads
    block = block_of(ctx.parents.get(then), then) or []
    k = next((k for k, st in enumerate(block) if st is then), 0)
    for j in range(k - 1, -1, -1):
        st = block[j]
        found = [n for n in stores if ctx.inside(n, st)]
        if not found:
            continue
        if not (isinstance(st, ast.Assign) and st.targets == found) or any(ctx.inside(n, st.value) for n in loads):
            return None, loads
        between = block[j + 1:k]
        if any(isinstance(n, (ast.Break, ast.Continue, ast.Return, ast.Raise, ast.Yield, ast.YieldFrom))
               for st in between for n in every_node(st)):
            return None, loads
        return st, [n for n in loads if any(ctx.inside(n, s) for s in (*between, then))]
    return None, loads


def _repeated(ctx: FixContext, node: ast.AST, scope: ast.AST) -> bool:
    """A loop of ``scope`` around ``node`` may run it more than once: each pass would read the one tensor a binding
    before the loop made, and a backward in each would go through its graph again (not ``for _ in range(1)``,
    ``for x in [a]``)."""
    return any(not (isinstance(loop, ast.For) and (
        isinstance(loop.iter, (ast.List, ast.Tuple)) and len(loop.iter.elts) == 1
        or isinstance(loop.iter, ast.Call) and ctx.qual(loop.iter.func) == "builtins.range"
        and [ctx.source(a) for a in loop.iter.args] == ["1"])) for loop in ctx.loops_around(node, scope))


def _runs_before(ctx: FixContext, first: ast.stmt, then: ast.stmt) -> bool:
    """Whether ``first`` always runs before ``then``: it, or a block around it whose body runs whole whenever what
    follows runs (a ``with``, a ``try`` without handlers, an ``if`` whose test is a true constant), is a statement
    of a block that holds ``then`` (or a statement around it), earlier in that block."""
    reached = {id(st) for st in (then, *ctx.ancestors(then))}
    stmt: ast.AST | None = first
    while stmt is not None:
        block = block_of(ctx.parents.get(stmt), stmt) or []
        k = next((k for k, st in enumerate(block) if st is stmt), len(block))
        if any(id(st) in reached for st in block[k + 1:]):
            return True
        around = ctx.parents.get(stmt)
        whole = isinstance(around, ast.With) or isinstance(around, ast.Try) and not around.handlers or isinstance(
            around, ast.If) and isinstance(around.test, ast.Constant) and around.test.value is True
        stmt = around if whole and any(st is stmt for st in around.body) else None
    return False


def _returns_numpy_of_argument(fn: ast.AST, method: bool) -> bool:
    """``def f(self, t)`` (``method``) or ``def f(t)``, undecorated, whose body is ``return t[.detach()][.cpu()].numpy()``."""
    if not isinstance(fn, ast.FunctionDef) or fn.decorator_list or len(fn.body) != 1 \
            or not isinstance(fn.body[0], ast.Return):
        return False
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if fn.args.vararg or fn.args.kwarg or fn.args.kwonlyargs or fn.args.defaults \
            or params[:1] != ["self"] * method or len(params) != 1 + method:
        return False
    value = fn.body[0].value
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "numpy"
            and not value.args and not value.keywords):
        return False
    source = value.func.value
    while isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute) \
            and source.func.attr in _TO_NUMPY and not source.args and not source.keywords:
        source = source.func.value
    return isinstance(source, ast.Name) and source.id == params[-1]


def _plain_keywords(keywords: list[ast.keyword]) -> bool:
    """NumPy reduction keywords torch spells alike: an axis of numbers, ``keepdims`` a bool, ``ddof`` a number."""
    for k in keywords:
        if k.arg == "axis" and not _axis(k.value) or k.arg == "ddof" and not number_written_out(k.value) \
                or k.arg == "keepdims" and not (isinstance(k.value, ast.Constant) and isinstance(k.value.value, bool)):
            return False
    return True


def _axis(node: ast.expr) -> bool:
    return number_written_out(node) or isinstance(node, ast.Tuple) and all(number_written_out(e) for e in node.elts)


def _twin_keywords(ctx: FixContext, name: str, names: dict, keywords: list[ast.keyword]) -> list[str]:
    """The torch twin's keywords for NumPy's, then those it needs to mean NumPy's defaults (``NUMPY_TWIN_DEFAULTS``)."""
    spelled = {names[k.arg]: ctx.source(k.value) for k in keywords}
    for key, value in NUMPY_TWIN_DEFAULTS.get(name, {}).items():
        spelled.setdefault(key, value)
    return [f"{k}={v}" for k, v in spelled.items()]




def _keep_tensors_in_arithmetic(ctx: FixContext, finding: Finding) -> Fix:
    node = finding.node
    torch = ctx.torch_name()
    stmt = ctx.statement_of(node)
    candidates = calls(stmt)
    # torch.tensor([a, b]) with no other arguments -> torch.stack([a, b])
    for call in candidates:
        if (ctx.qual(call.func) == "torch.tensor" and torch is not None and len(call.args) == 1 and not call.keywords
                and isinstance(call.args[0], (ast.List, ast.ListComp)) and (not isinstance(call.args[0], ast.List) or call.args[0].elts)):
            _require_not_rebuilt_again(ctx, call)  # `Variable(torch.tensor([...]), requires_grad=True)`: a new leaf still
            if isinstance(call.args[0], ast.List) and any(number_written_out(e) for e in call.args[0].elts):
                # `torch.tensor([0, amp])`: torch.stack takes tensors only, of one shape; how the number becomes one
                # (its dtype, the tensors' shape) is the author's choice
                raise CannotFix("a number written beside the tensors: `torch.stack` takes tensors of one shape only")
            new = parse_expr(_stacked(ctx, call, torch, ctx.source(call.args[0])))
            rw = Rewrite(ctx).replace_node(ctx.cst(call), new)
            return rw.fix(f"Keep the graph: `{torch}.stack(...)` instead of `{torch}.tensor(...)`", safe=True)
    # t.item() / float(t) inside tensor arithmetic -> t
    for call in candidates:
        inner = None
        if isinstance(call.func, ast.Attribute) and call.func.attr == "item" and not call.args:
            inner = call.func.value
        elif isinstance(call.func, ast.Name) and call.func.id == "float" and len(call.args) == 1 and "float" not in ctx.imports:
            inner = call.args[0]
        if inner is None:
            continue
        while isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in _TO_NUMPY \
                and not inner.args and not inner.keywords:
            inner = inner.func.value  # `t.detach().item()` reads the number of `t`: keep `t`, not a detached copy
        parent = ctx.parents.get(call)
        if isinstance(parent, ast.BinOp) or _summed(ctx, call):
            safe = True
        elif isinstance(parent, ast.Assign) and parent.value is call and len(parent.targets) == 1 \
                and isinstance(parent.targets[0], ast.Name):
            safe = _only_arithmetic_uses(ctx, parent, parent.targets[0].id)
        else:
            continue
        text = ctx.source(inner)
        if not isinstance(inner, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
            text = f"({text})"
        if isinstance(parent, ast.Assign) and parent.value is call and isinstance(inner, ast.Name) \
                and parent.targets[0].id == inner.id:
            # `aux = aux.detach().item()`: `aux = aux` would be left; the name keeps its tensor without the line
            title = f"Keep the graph: delete `{short(ctx.source(parent))}`, so `{inner.id}` stays the tensor"
            return Rewrite(ctx).remove_statement(parent).fix(
                title if safe else f"{title} (unsafe: the name then holds a tensor in its other uses)", safe=safe)
        rw = Rewrite(ctx).replace_node(ctx.cst(call), parse_expr(text))
        title = f"Keep the graph: use `{ctx.source(inner)}` instead of `{ctx.source(call)}`"
        return rw.fix(title if safe else f"{title} (unsafe: the name then holds a tensor in its other uses)", safe=safe)
    raise CannotFix("no tensor-keeping rewrite for this graph break")


_WRITE_CODES = ("GG001", "GG002", "GG003", "GG004", "GG005")  # what a write may become once grad mode is on


def _grad_on(ctx: FixContext, event: GradOffBackward) -> Fix:
    """Grad mode on where the loss is computed (``GradOffBackward``): a ``@torch.no_grad()`` function that runs the
    computation through a call in its own body (an optimizer's ``step`` calling its closure) makes that call under
    ``torch.enable_grad()``, as torch's optimizers do; a ``with torch.no_grad():`` block that computes it is
    dropped, its body kept (unsafe: every op of the block then records a graph, and a value meant to stay out of
    the gradient goes into it).  A switch that turns grad mode off for what follows (``set_grad_enabled(False)``),
    or a decorated function called from outside, gets no fix: where to turn it back on is the author's choice."""
    turned_off, node = event.turned_off, event.node
    if node is not turned_off:
        fn = ctx.function_of(node)
        if fn is None or not any(d is turned_off for d in fn.decorator_list):
            raise CannotFix("the decorated function is called from outside: enable_grad around the call stays off")
        stmt = ctx.statement_of(node)
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return)):
            raise CannotFix("the call is not a simple statement of its own")
        rw = Rewrite(ctx)
        torch = rw.torch_module(stmt)
        rw.wrap_in_with(stmt, f"{torch}.enable_grad()")
        callee = node.func if isinstance(node, ast.Call) else None
        params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
        handed = isinstance(callee, ast.Name) and callee.id in params  # a closure: the caller's code, run for it
        title = f"Compute it with grad mode on: `with {torch}.enable_grad():` around `{short(ctx.source(stmt))}`"
        return rw.fix(title if handed else title + " (unsafe: the call records a graph each time the function runs, "
                      "also where nothing backpropagates)", safe=handed)
    block = ctx.parents.get(ctx.parents.get(node))
    if not (isinstance(block, ast.With) and len(block.items) == 1 and block.items[0].optional_vars is None
            and grad_off(ctx, node, inference=True) and not node.args and block.body[0].lineno > block.lineno):
        raise CannotFix("grad mode is switched off for what follows, not by a block of its own")
    return _drop_block(ctx, block)


def _drop_block(ctx: FixContext, block: ast.With) -> Fix:
    """``block``'s header deleted and its body kept, checked: the analysis must find no write the body makes
    turn into one autograd refuses once grad mode is on (a parameter updated in place, a saved tensor written)."""
    if any(isinstance(n, ast.Call) and (ctx.qual(n.func) == "torch.autograd.grad" or isinstance(n.func, ast.Attribute)
                                        and n.func.attr == "backward") for n in every_node(block)):
        # Its gradients, taken with grad mode on but no `create_graph`, would have no graph: first order where
        # a loss computed from them means to differentiate through them.
        raise CannotFix("the block takes gradients: with grad mode on they would still have no graph")
    edits = _body_kept(ctx, block)
    shift = block.body[0].lineno - block.lineno
    writes = [st.lineno - shift for st in walk_statements(block)
              if isinstance(st, ast.AugAssign) or isinstance(st, ast.Assign) and not isinstance(st.targets[0], ast.Name)
              or isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)]
    fixed = apply_edits(ctx.text, edits)
    if any(ctx.still_found(fixed, FindingId(code, line)) for line in writes for code in _WRITE_CODES):
        raise CannotFix("a write in the block is refused by autograd once grad mode is on")
    return Fix(f"Compute it with grad mode on: drop `with {ctx.source(block.items[0].context_expr)}:` and keep its "
               "body (unsafe: every op of the block then records a graph, and a value meant to stay out of the "
               "gradient goes into it)", False, tuple(edits))


def _reduce_in_torch(ctx: FixContext, event: NumpyRefused) -> Fix:
    """``np.sum(losses)`` / ``np.mean(losses)`` of a list every element of which is a tensor (``NumpyRefused``),
    which torch refuses to turn into arrays: ``torch.stack(losses).sum()``, the same number with its gradient.
    Unsafe: the result is a tensor that keeps the graph, where values meant only for a log want ``.detach()``."""
    call = event.node
    reduction = (ctx.qual(call.func) or "").removeprefix("numpy.")
    if not event.every_tensor or reduction not in _REDUCTIONS or len(call.args) != 1 or call.keywords \
            or isinstance(call.args[0], ast.Starred):
        raise CannotFix("not a whole sum or mean of a list of tensors")
    rw = Rewrite(ctx)
    torch = rw.torch_module(ctx.statement_of(call))
    text = f"{torch}.stack({ctx.source(call.args[0])}).{reduction}()"
    return rw.replace_node(ctx.cst(call), parse_expr(text)).fix(
        f"Keep the graph: `{short(text)}` instead of `{short(ctx.source(call))}` (unsafe: the result keeps the "
        "gradient, where values meant only for a log would be `.detach()`ed)", safe=False)


def _drop_guard(ctx: FixContext, event: GuardedUnfreeze) -> Fix:
    """``if p.requires_grad: p.requires_grad = flag`` -> ``p.requires_grad = flag``, when the run saw that every
    parameter the guard skips was frozen by that same write (``GuardedUnfreeze.own``).  Unsafe: a call of the
    setter the analysis did not see, on a module frozen by other code, would unfreeze that module too."""
    guard = event.node
    if not event.own:
        raise CannotFix("some of the parameters were frozen by other code, maybe on purpose")
    if guard.orelse:
        raise CannotFix("the guard has an else branch")
    return Fix(f"Drop the guard `if {short(ctx.source(guard.test))}:` and set the flag on every parameter (unsafe: "
               "a call of the setter on a module frozen by other code would unfreeze it too)", False,
               tuple(_body_kept(ctx, guard)))


def _body_kept(ctx: FixContext, stmt: ast.With | ast.If) -> list[TextEdit]:
    """The edits that delete ``stmt``'s header and dedent its body into its place."""
    indent, inner = ctx.indent_of(stmt), ctx.indent_of(stmt.body[0])
    lines = range(stmt.body[0].lineno, stmt.end_lineno + 1)
    if stmt.body[0].lineno == stmt.lineno or len(inner) <= len(indent) \
            or ctx.statement_of(stmt) is not stmt or ctx.lines[stmt.lineno - 1][:len(indent)].strip():
        raise CannotFix("the body is not on lines of its own below the header")
    if any(ctx.lines[k - 1].strip() and not ctx.lines[k - 1].startswith(inner) for k in lines) \
            or any(q in ctx.source(stmt) for q in ('"""', "'''")) \
            or any(ctx.lines[k - 1].rstrip().endswith("\\") for k in lines):
        raise CannotFix("the body's lines do not all carry its indentation (a string or a continuation)")
    cut = len(inner) - len(indent)
    return [TextEdit(stmt.lineno, 1, stmt.body[0].lineno, 1, ""),
            *(TextEdit(k, 1, k, cut + 1, "") for k in lines if ctx.lines[k - 1].strip())]


def _build_after_replacement(ctx: FixContext, event: ReplacedParameter) -> Fix:
    """``opt = torch.optim.X(model.parameters())`` just before the statement that replaces a module of ``model``
    (nothing between reads ``opt`` or rebinds what its construction reads, ``inference/stale_optimizers.py``):
    ``build_optimizer_after``.  Only a construction of the optimizer itself moves, or the call of a helper that
    the run saw build it in its own frame and that does nothing else (``_only_builds``)."""
    built, site = event.built, event.site or event.node
    optimizer = event.optimizer
    if not isinstance(built, ast.Assign):
        raise CannotFix("a call builds the optimizer and binds it (nonlocal): moving it may move what else it does")
    if built.value is not optimizer.ctor and not (optimizer.made_in is built.value
                                                  and _only_builds(ctx, built.value, optimizer.ctor)):
        raise CannotFix("a helper builds the optimizer: moving its call may move what else it does")
    return build_optimizer_after(ctx, built, ctx.statement_of(site))


def _only_builds(ctx: FixContext, call: ast.expr, ctor: ast.AST | None) -> bool:
    """The function around ``ctor`` (undecorated) only returns it, built from its own parameters (bound to a name
    first, or not), and ``call`` names nothing but variables (what it evaluates later is what it evaluates now)."""
    fn = ctx.function_of(ctor) if ctor is not None else None
    if fn is None or fn.decorator_list or not isinstance(call, ast.Call) or not all(
            isinstance(n, (ast.Name, ast.Attribute, ast.Constant, ast.Call)) for n in every_node(call)) \
            or sum(isinstance(n, ast.Call) for n in every_node(call)) != 1:
        return False
    body, returned = fn.body, ctor
    if len(body) == 2 and isinstance(body[0], ast.Assign) and body[0].value is ctor \
            and isinstance(body[0].targets[0], ast.Name) and len(body[0].targets) == 1:
        returned = body[0].targets[0].id
    elif len(body) != 1:
        return False
    last = body[-1]
    if not (isinstance(last, ast.Return) and (last.value is ctor if returned is ctor else isinstance(
            last.value, ast.Name) and last.value.id == returned)):
        return False
    own = set(parameter_names(fn, False))
    return names_read(ast.Tuple([*ctor.args, *(k.value for k in ctor.keywords)])) <= own


def build_optimizer_after(ctx: FixContext, built: ast.Assign, anchor: ast.stmt) -> Fix:
    """The one fix of an optimizer built before the statement that replaces modules or parameters it holds (the
    static finding's ``ReplacedParameter.built``; the probe's, ``probed_fixes``): its construction moves just after
    that statement, so that it takes the parameters the model has then.  The callers establish that ``built`` is
    the statement binding the optimizer just before ``anchor`` in its block, with nothing between naming it or
    rebinding a name its construction reads (``stale_optimizers.built_just_before``).  Unsafe: the optimizer no
    longer holds the replaced parameters, which code the analysis does not see (an unregistered reference to the
    old module) may still train.  ``anchor`` in a compound statement of that block (a loop, an ``if``): after it.
    ``built`` run alone by a compound statement of that block (``moves.units``): that statement moves whole."""
    unit, anchor = next(((u, st) for u in units(ctx, built) for st in block_of(ctx.parents.get(u), u) or ()
                         if ctx.inside(anchor, st)), (None, None))
    if anchor is None:
        raise CannotFix("the replacement is not in the block the optimizer is built in")
    for stmt in (unit, anchor):
        ctx.require_own_lines(stmt)
    edits = move_statements_after(ctx, [unit], [unit], anchor)
    return Fix(f"Build `{ast.unparse(built.targets[0])}` after the replacement (unsafe: it no longer holds the replaced "
               "parameters, which other code may still train)", False, tuple(edits))


def _optimizer_for_the_copy(ctx: FixContext, event: CopyTrained) -> Fix:
    """``twin = copy.deepcopy(M)`` then a call handed ``twin`` and an optimizer ``E`` over ``M``'s parameters
    (``CopyTrained.paired``, with the arguments that give them) -> ``E`` there becomes
    ``copy.deepcopy(E, {id(p): q for p, q in zip(M.parameters(), twin.parameters())})``: a copy of the optimizer
    (its class, groups, settings and state, whatever the class) whose parameters are the copy's, matched one for one
    in the order the deep copy keeps.  Only when ``M``, ``twin`` and ``E`` are names or attribute chains, the copy
    is bound to ``twin`` by a statement of the call's block before it, and nothing between calls anything or names
    the roots of ``M`` or ``twin`` (so both still hold what they held at the copy).  Unsafe: the copy's optimizer starts with
    the original's state (momentum), and a parameter the optimizer holds outside ``M`` is copied too, no longer
    the one the original trains."""
    call, copied, given = next(((c, a, e) for c, o, a, e in event.paired if o is event.optimizer), (None,) * 3)
    deep = event.node
    if not (isinstance(call, ast.Call) and copied is not None and given is not None and is_dotted(copied)
            and is_dotted(given) and isinstance(deep, ast.Call) and len(deep.args) == 1 and not deep.keywords
            and is_dotted(deep.args[0])):
        raise CannotFix("the copy, its original or the optimizer is not a name or attribute chain")
    made, site = ctx.statement_of(deep), ctx.statement_of(call)
    block = block_of(ctx.parents.get(site), site)
    if not (isinstance(made, ast.Assign) and len(made.targets) == 1 and made.value is deep and block is not None
            and is_dotted(made.targets[0]) and ast.unparse(made.targets[0]) == ast.unparse(copied)
            and any(st is made for st in block)):
        raise CannotFix("the copy is not bound, in the call's block, to the name the call is handed")
    start, end = next(i for i, st in enumerate(block) if st is made), next(i for i, st in enumerate(block) if st is site)
    roots = {dotted_root(deep.args[0]), dotted_root(copied)}
    between = [n for st in block[start + 1:end] for n in every_node(st)]
    if start >= end or any(isinstance(n, ast.Name) and n.id in roots or isinstance(n, ast.Call) for n in between) \
            or any(isinstance(n, (ast.NamedExpr, ast.Lambda)) for n in every_node(site)):
        raise CannotFix("code between the copy and the call may change what the original or the copy holds")
    source = ctx.source
    code = (f"{source(deep.func)}({source(given)}, {{id(p): q for p, q in zip({source(deep.args[0])}.parameters(), "
            f"{source(copied)}.parameters())}})")
    line, column, end_line, end_column = ctx.char_range(given)
    return Fix(f"Hand the copy an optimizer of its own: a deep copy of `{short(source(given))}` over the copy's "
               "parameters (unsafe: it starts with the original's state, and copies any parameter it holds outside "
               "the copied module)", False, (TextEdit(line, column + 1, end_line, end_column + 1, code),))



def _set_on_parameters(ctx: FixContext, finding: Finding) -> Fix:
    """``module.requires_grad = False`` -> ``module.requires_grad_(False)``: the method sets every parameter."""
    stmt = finding.node
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute)):
        raise CannotFix("not a single attribute assignment")
    ctx.require_own_lines(stmt)
    module = ctx.source(stmt.targets[0].value)
    call = f"{module}.requires_grad_({ctx.source(stmt.value)})"
    rw = Rewrite(ctx).replace_node(ctx.cst(stmt), cst_mod().Expr(parse_expr(call)))
    return rw.fix(f"Freeze the parameters: `{call}`", safe=True)


def _return_the_loss(ctx: FixContext, finding: Finding) -> Fix:
    """A ``training_step`` that returns nothing -> ``return loss`` at its end, ``loss`` the last tensor requiring
    grad it binds (the run's answer), bound by a statement of the hook's own body: so on every path to its end.
    Unsafe: whether that tensor is the loss to train on is the author's to say."""
    name = finding.data["unreturned"]
    stmt = ctx.statement_of(name)
    fn = ctx.function_of(name)
    if not (isinstance(name, ast.Name) and isinstance(stmt, (ast.Assign, ast.AnnAssign)) and fn is not None
            and ctx.parents.get(stmt) is fn):
        raise CannotFix("the tensor is not bound on every path to the hook's end")
    ctx.require_own_lines(fn.body[-1])
    return Fix(f"Return the loss: `return {name.id}` at the end of `{fn.name}` (unsafe: whether `{name.id}` is the loss "
               "to train on is the author's to say)", False, (return_at_end(ctx, fn, name.id),))


def _write_into_parameter(ctx: FixContext, finding: Finding) -> Fix:
    """``q.scale = nn.Parameter(v)`` after an optimizer took the old parameter -> ``q.scale.copy_(v)`` under
    ``torch.no_grad()``: the parameter the optimizer holds gets the values.  Unsafe: they take its shape, dtype and
    device (``copy_`` broadcasts a smaller shape), and whatever else holds the old parameter sees them too."""
    stmt = finding.node
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute)
            and is_dotted(stmt.targets[0])):
        raise CannotFix("not one assignment to an attribute")
    call = stmt.value
    if not (isinstance(call, ast.Call) and ctx.qual(call.func) in ("torch.nn.Parameter", "torch.nn.parameter.Parameter")
            and len(call.args) == 1 and not isinstance(call.args[0], ast.Starred) and not call.keywords):
        raise CannotFix("not a new Parameter of one tensor's values")
    rw = Rewrite(ctx)
    torch = rw.torch_module(stmt)
    write = f"{ctx.source(stmt.targets[0])}.copy_({ctx.source(call.args[0])})"
    rw.replace_node(ctx.cst(stmt), cst_mod().Expr(parse_expr(write))).wrap_in_with(stmt, f"{torch}.no_grad()")
    return rw.fix(f"Write the values into the parameter the optimizer holds: `{short(write)}` under "
                  f"`{torch}.no_grad()` (unsafe: they take its shape, dtype and device, and whatever else holds it "
                  "sees them)", safe=False)


def _let_gradient_through(ctx: FixContext, finding: Finding) -> Fix:
    """``t.detach()`` / ``t.data`` that starves parameters the optimizer updates -> ``t``: the gradient flows again."""
    node = finding.node
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "detach" \
            and not node.args and not node.keywords:
        inner = node.func.value
    elif isinstance(node, ast.Attribute) and node.attr == "data":
        inner = node.value
    elif isinstance(node, ast.Call) and ctx.qual(node.func) in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
        return _set_past_registration(ctx, node)
    else:
        raise CannotFix("not a plain `.detach()` or `.data`")
    rw = Rewrite(ctx).replace_node(ctx.cst(node), parse_expr(ctx.source(inner)))
    return rw.fix(f"Let the gradient through: `{ctx.source(inner)}` instead of `{ctx.source(node)}`", safe=True)


def _set_past_registration(ctx: FixContext, call: ast.Call) -> Fix:
    """``m.w = nn.Parameter(t)`` / ``setattr(m, name, nn.Parameter(t))`` that starves what ``t`` was computed from
    -> ``object.__setattr__(m, "w", t)``: the attribute holds ``t`` with its history, past the module's parameter
    registration (a module refuses a plain tensor for a name it registered as a parameter).  Refused in
    ``__init__``: the value is made once there, and its history would be backwarded again at every step (torch
    raises at the second).  Unsafe: the module's ``parameters()`` and ``state_dict()`` keep the old parameter."""
    stmt = ctx.statement_of(call)
    if not (len(call.args) == 1 and not isinstance(call.args[0], ast.Starred)
            and all(k.arg == "requires_grad" and isinstance(k.value, ast.Constant) and k.value.value is True
                    for k in call.keywords)):
        raise CannotFix("not a new Parameter of one tensor's values")
    if isinstance(stmt, ast.Assign) and stmt.value is call and len(stmt.targets) == 1 \
            and isinstance(stmt.targets[0], ast.Attribute) and is_dotted(stmt.targets[0].value):
        owner, name = ctx.source(stmt.targets[0].value), repr(stmt.targets[0].attr)
    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name) \
            and stmt.value.func.id == "setattr" and "setattr" not in ctx.imports and len(stmt.value.args) == 3 \
            and stmt.value.args[2] is call and not stmt.value.keywords \
            and not any(isinstance(a, ast.Starred) for a in stmt.value.args):
        owner, name = ctx.source(stmt.value.args[0]), ctx.source(stmt.value.args[1])
    else:
        raise CannotFix("the new Parameter is not set on an attribute by the statement")
    function = ctx.function_of(stmt)
    if function is None or function.name == "__init__":
        raise CannotFix("the value is made once, where the module is built: its history would be backwarded at "
                        "every step")
    ctx.require_own_lines(stmt)
    code = f"object.__setattr__({owner}, {name}, {ctx.source(call.args[0])})"
    rw = Rewrite(ctx).replace_node(ctx.cst(stmt), cst_mod().Expr(parse_expr(code)))
    return rw.fix(f"Let the gradient through: `{short(code)}` keeps its history (unsafe: the module's "
                  "`parameters()` and `state_dict()` keep the old parameter)", safe=False)


def _grad_on_for_statement(ctx: FixContext, finding: Finding) -> Fix:
    """``pred = ema(pred)`` rebound with grad mode off -> that statement alone in a ``with torch.enable_grad():``
    block: computed with its graph, as if moved out of the ``no_grad`` block, while the rest of the block stays
    without one.  The run says what turned grad mode off (never inference mode, which grad mode does not undo)."""
    stmt = ctx.statement_of(finding.node)
    if not (isinstance(stmt, ast.Assign) and stmt.value is finding.node):
        raise CannotFix("the value is not a whole assignment's")
    rw = Rewrite(ctx)
    torch = rw.torch_module(stmt)
    return rw.wrap_in_with(stmt, f"{torch}.enable_grad()").fix(
        f"Let the gradient through: compute `{short(ctx.source(stmt))}` with grad mode on (`{torch}.enable_grad()`)",
        safe=True)


def _append_the_tensor(ctx: FixContext, finding: Finding) -> Fix | None:
    """``values.append(v.item())`` (or ``float(v)``), whose numbers another line makes a tensor again
    (``rebuilt_at``) -> ``values.append(v)``: the list keeps the tensors with their graph, as a rollout that
    stacks its critic values must.  The rebuild, when it is ``torch.tensor(values)`` itself, becomes their stack
    (``_stacked``); a rebuild of another list (numbers read out of this one again, ``[float(v) for v in values]``,
    a cut of its own, reported where they are read) is left as it is, when the analysis of the fixed code finds
    no graph break on its line.  Whether the rebuild reads the very list the numbers went into, holding only them,
    is the run's answer (``rebuilds_its_list``), whatever names a helper and its caller give it; without one, CannotFix
    when the rebuild names the list where the fix cannot tell it is the same (a closure's ``self.values``): it would
    make a tensor of the tensors without their graph.  CannotFix when the numbers are also an operand of a tensor op
    (``GraphBreak.constant_in``: ``ret - values[t]``, an advantage), where the tensors would bring their graph.
    Unsafe: the list holds 0-dim tensors where it held numbers, for every reader.
    None when the read is not the one argument of an ``append`` statement."""
    read = finding.node
    tensor = _read_out_of(read) if isinstance(read, ast.Call) else None
    if tensor is None or isinstance(read.func, ast.Attribute) and read.func.attr == "tolist" \
            or isinstance(read.func, ast.Name) and read.func.id in ctx.imports:
        return None
    while isinstance(tensor, ast.Call) and isinstance(tensor.func, ast.Attribute) and tensor.func.attr in _TO_NUMPY \
            and not tensor.args and not tensor.keywords:
        tensor = tensor.func.value  # `v.detach().item()` reads the number of `v`: append `v`, not a detached copy
    append, kept = ctx.parents.get(read), read
    if isinstance(append, ast.IfExp) and read is not append.test:  # `v if keep else v.item()`: this branch's
        append, kept = ctx.parents.get(append), append
    if not (isinstance(append, ast.Call) and isinstance(append.func, ast.Attribute) and append.func.attr == "append"
            and append.args == [kept] and not append.keywords and is_dotted(append.func.value)
            and isinstance(ctx.parents.get(append), ast.Expr)):
        return None
    if any((f.data or {}).get("constant_in") is not None for f in (finding, *finding.twins)):
        raise CannotFix("the numbers are also constants of tensor arithmetic (an advantage, a target), which the "
                        "tensors would bring their graph into")
    listed = ctx.source(append.func.value)
    rw = Rewrite(ctx).replace_node(ctx.cst(read), parse_expr(_atom(ctx, tensor)))
    title = f"Keep the graph: append `{short(ctx.source(tensor))}` to `{short(listed)}`, not its number"
    rebuilt = finding.data["rebuilt_at"]
    torch = ctx.torch_name()
    # The run's answer, whatever names the two lines give the list (a helper's parameter, its caller's variable).
    its_list = {(f.data or {}).get("rebuilds_its_list") for f in (finding, *finding.twins)}
    one_arg = isinstance(rebuilt, ast.Call) and len(rebuilt.args) == 1
    of_list = its_list == {True} or one_arg and ctx.source(rebuilt.args[0]) == listed and its_list != {False}
    if of_list and ctx.qual(rebuilt.func) in ("torch.tensor", "torch.as_tensor") and torch is not None \
            and (its_list == {True} or _same_list(ctx, append, rebuilt, append.func.value)) and not rebuilt.keywords:
        _require_not_rebuilt_again(ctx, rebuilt)
        stacked = _stacked(ctx, rebuilt, torch, ctx.source(rebuilt.args[0]))
        rw.replace_node(ctx.cst(rebuilt), parse_expr(stacked))
        title += f", and `{short(stacked)}` instead of `{short(ctx.source(rebuilt))}`"
    elif of_list or other_file(rebuilt) is not None or ctx.still_found(apply_edits(ctx.text, rw.edits()),
                                                            FindingId("GG103", rebuilt.lineno)):
        raise CannotFix("the rebuild this fix does not change would then make a tensor of the tensors without "
                        "their graph")
    return rw.fix(f"{title} (unsafe: the list then holds tensors where it held numbers, for every reader)",
                  safe=False)


def _same_list(ctx: FixContext, append: ast.AST, rebuilt: ast.AST, listed: ast.expr) -> bool:
    """Whether ``listed`` read at ``rebuilt`` is the list ``append`` added to: the same function, or methods of
    one class and an attribute of their own object (``self.values``)."""
    fn, other = ctx.function_of(append), ctx.function_of(rebuilt)
    if fn is None or other is None:
        return False
    if fn is other:
        return True
    root = listed
    while isinstance(root, ast.Attribute):
        root = root.value
    cls = ctx.class_of(fn)
    return (isinstance(listed, ast.Attribute) and isinstance(root, ast.Name) and cls is not None
            and ctx.parents.get(fn) is cls and ctx.parents.get(other) is cls
            and all(f.args.args and f.args.args[0].arg == root.id for f in (fn, other))
            and not any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
                        for f in (fn, other) for d in f.decorator_list))


def _summed(ctx: FixContext, call: ast.Call) -> bool:
    """``sum(t.item() for t in ...)``: the sum of the tensors is the same number, with its graph."""
    comprehension = ctx.parents.get(call)
    if not isinstance(comprehension, (ast.GeneratorExp, ast.ListComp)) or comprehension.elt is not call:
        return False
    outer = ctx.parents.get(comprehension)
    # The sum rebuilt into a new leaf (`torch.tensor(sum(...), requires_grad=True)`) would stay cut: not this fix.
    rebuilt = isinstance(ctx.parents.get(outer), ast.Call) and ctx.parents.get(outer).func is not outer
    return (isinstance(outer, ast.Call) and isinstance(outer.func, ast.Name) and outer.func.id == "sum"
            and outer.args == [comprehension] and "sum" not in ctx.imports and not rebuilt)


def _only_arithmetic_uses(ctx: FixContext, assign: ast.Assign, name: str) -> bool:
    """Whether every later read of ``name`` in its function is an operand of arithmetic (a tensor serves there
    as the number did), and nothing else assigns it."""
    scope = ctx.scope_of(assign)
    uses = 0
    for node in ctx.names_in(scope).of(name):
        if node is assign.targets[0]:
            continue
        if not isinstance(node.ctx, ast.Load) or node.lineno < assign.lineno:
            return False
        if not isinstance(ctx.parents.get(node), (ast.BinOp, ast.UnaryOp)):
            return False
        uses += 1
    return uses > 0


RULE = Rule(
    code="GG103",
    name="graph-break",
    summary="A tensor that requires grad is rebuilt without its graph (`torch.tensor(t)`, `.item()`, numpy) and used in a loss.",
    explanation="""
`torch.tensor(t)`, `torch.tensor([t1, t2])`, `t.new_tensor(...)`, `torch.from_numpy(t.detach().numpy())`
and arithmetic on `t.item()`/`float(t)`/`t.tolist()` make a new leaf from the *values* of `t`: the graph
that produced `t` is gone.  A loss built from it gives no gradient to what produced `t` (gradients stay
None or miss that term); if nothing else requires grad, `backward()` raises `element 0 of tensors does not
require grad and does not have a grad_fn`.  `torch.tensor(float(loss), requires_grad=True)` backpropagates
"successfully" and leaves every parameter's grad None.

`t.detach()` (and a returned `t.data` of an activation) cuts the graph the same way, usually on purpose.  It
is flagged only when parameters that `t` was computed from are updated by an optimizer's `step()` (or a
manual update reading their `.grad` under no_grad, or a read of the `.grad` of parameters an optimizer holds after
the backward) and no backward of the function reaches them: a forward
returning `h.detach()`, a head fed `features.detach()` while the backbone is in the optimizer.  Their grads
stay None and they never learn.  "No backward reaches them" is claimed only when every backward's loss is known:
one that runs from a value the analysis cannot see (an objective the code is handed), or whose loss takes one
(a buffer another method filled, an argument), may reach them, and nothing is reported.  It is also flagged when one term of such a loss is built on the cut value
and reaches none of the parameters the steps after that backward update, while the loss's other terms reach
them: the generator's loss scoring `D(fake.detach())` beside an L1 term, stepped by the generator's optimizer,
trains the generator on the L1 term alone.

`t.detach_()` is the in-place spelling of a cut, and torch refuses it in two places: on a view (indexing,
`transpose`, a `reshape` of a contiguous tensor...) at once ("Can't detach views in-place"), and on a tensor an
earlier op saved as an input, when the backward unpacks that save ("Trying to use a saved tensor that has been
detached in-place"): detaching in place never cuts a graph already built from the tensor, so it does not
truncate a recurrent state's history either.  `t = t.detach()` is the spelling that works.

A loss computed with grad mode off has no graph either: inside a `torch.no_grad()` block, after
`torch.set_grad_enabled(False)`, or in a `@torch.no_grad()` function (an optimizer's `step` that runs the closure
it is given, an evaluation helper reused for training).  Every op there runs on tensors that require grad without
recording anything, so `backward()` on the loss raises "element 0 of tensors does not require grad".  It is
reported where grad mode is switched off, or at the call a decorated function runs the computation through.

A value computed with grad mode off and used later as a term of a loss is cut the same way: a model's output
computed while acting under no_grad and copied into a rollout buffer (or kept on an object), then read by the
update in place of the output it recomputes.  When a loss adds a term computed only from such values (and other
values without a graph), that term changes no gradient; it is flagged where grad mode on first reads the values,
only when parameters they were computed from are updated (or their gradients read) and no backward reaches them.

NumPy refuses a tensor that requires grad outright: a NumPy function given a list of such tensors
(`np.sum([loss_a, loss_b])`, `np.mean([...])`) or `np.array(t)`/`np.asarray(t)` converts each with `.numpy()`, and
torch raises "Can't call numpy() on Tensor that requires grad" at that call.

A Lightning-style `training_step` that computes its loss and returns nothing (it logs the loss, or keeps it on
the module) trains nothing: under automatic optimization the trainer runs backward and the optimizer step only on
what the hook returns, and skips the batch on None.  It is flagged when the class is a LightningModule (by its base,
or a module class with `configure_optimizers` too), nothing in it turns automatic optimization off or runs a
backward, and a tensor the hook computes requires grad.

A loss computed as a Python number (`loss -= log_prob.item() * reward`, `np.mean([float(l) for l in losses])`)
has no `backward`: Python raises AttributeError there, and the line that read the values out is the one to change.

`module.requires_grad = False` on an `nn.Module` is the same silence from the other side: a module has no
`requires_grad` of its own (the method `requires_grad_()` is what reaches its parameters), so the assignment
stores a plain attribute, the parameters keep requiring grad, and the next backward and step train the module
that was meant to be frozen.  It is flagged when a later backward reaches the module's parameters, unless the
module's class keeps a `requires_grad` of its own.

A parameter or a submodule replaced after an optimizer took the old one (`model.fc = nn.Linear(...)`,
`setattr(model, name, ...)` in a loop over `named_children()`, `m.weight = nn.Parameter(...)`, or a pruner's or a
helper's method that swaps layers) leaves the optimizer holding the old tensors, which the model no longer uses: the
new ones get gradients no optimizer applies, silently.  It is flagged when a later backward reaches the new
parameters, no optimizer was given them (`add_param_group`, or an optimizer built after), and the optimizer is used
after the replacement (a step, or a `zero_grad()` before that backward).  It is reported at the assignment when it
is in the function that has the optimizer (or the new values could be copied into the old parameters); when a
helper makes it, at the call that leads there, or at the optimizer's construction when that is just before the
call in the same block with nothing between using the optimizer: build the optimizer after the call.
""",
    fix_advice="Keep the tensors: `torch.stack([t1, t2])` instead of `torch.tensor([t1, t2])`, `loss` instead of "
               "`torch.tensor(loss.item())`, tensor ops instead of numpy.  Drop a `.detach()` whose term should "
               "train what it cut off.  Freeze a module with `module.requires_grad_(False)`.",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
Any value read out of a tensor that requires grad and fed back into a backward is flagged. That includes a
constant put there on purpose, such as a normalising term. Write `.detach()` to say that a value is meant to have
no gradient: it is not flagged. Numbers read out of a tensor that itself reaches the same backward with its graph
(`float(v)` for GAE returns while `torch.stack(values)` is the value loss's prediction, a baseline `v.item()` beside
`v`'s own term) are a constant beside that tensor, a target or a weight: not flagged. In helpers other than `forward`, returning such a value is not flagged, because
the caller may intend it.  A `.detach()` is meant when nothing optimised depends on it alone (a target network,
a stop-gradient in a loss, a frozen encoder left out of the optimizer, a detach for logging): those are not
flagged.
""",
    invalid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
a, b = (w * 2).sum(), (w * 3).sum()
loss = torch.tensor([a, b]).sum()   # GG103
loss.backward()
""",
            raises=MESSAGE,
        ),
    ),
    valid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
a, b = (w * 2).sum(), (w * 3).sum()
loss = torch.stack([a, b]).sum()
loss.backward()
print(loss.item())
"""
        ),
    ),
)
