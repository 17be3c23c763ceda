"""Exceptions the user's code raised under the probe: which are autograd's immediate errors (a leaf, a
view of a leaf, a multi-output view, a no_grad view, a graph break at backward), mapped to a rule code
and the user's line; and which mean the process ran out of memory."""

from __future__ import annotations

import re

import torch

from ..knowledge import load_knowledge
from .cuts import copy_raise_finding
from .frames import UserCode, traceback_sites
from .merge import LEAF_ROWS_NOTE, MULTI_VIEW_NOTE, VIEW_NOTE
from .model import Note, ProbeFinding, Site
from .source import enclosing_function, expression_at, iterated_at, view_before
from .tracer import Tracer, _inplace_origins

# First match wins: the more specific messages come first.
_IMMEDIATE: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(r"created in no_grad mode and is being modified inplace"), "GG105",
     "in-place write to a view made under no_grad, with grad mode on"),
    (re.compile(r"is a view and (?:its base or another view of its base )?(?:has been|is being) modified inplace|"
                r"output of a function that returns multiple views"), "GG004",
     "in-place write to an output of a function that returns several views"),
    (re.compile(r"a view of a leaf Variable that requires grad is being used in an in-place operation"), "GG003",
     "in-place write through a view of a leaf tensor that requires grad"),
    (re.compile(r"a leaf Variable that requires grad is being used in an in-place operation"), "GG002",
     "in-place write to a leaf tensor that requires grad"),
    (re.compile(r"arguments don't support automatic differentiation, but one of the arguments requires grad"),
     "GG106", "a call with `out=` while an argument requires grad"),
    (re.compile(r"does not require grad and does not have a grad_fn"), "GG103",
     "backward() on a tensor cut off from the graph (a graph break)"),
    (re.compile(r"Can't detach views in-place"), "GG103",
     "in-place `.detach_()` of a view (torch cannot cut a view's history in place; rebinding the name to the "
     "result of `.detach()` does it)"),
    (re.compile(r"modified by an inplace operation"), "GG001",
     "backward() raised because a tensor saved for backward was modified in place"),
    (re.compile(r"Can't call numpy\(\) on Tensor that requires grad"), "GG103",
     ("a tensor that requires grad is handed to NumPy (np.sum or np.array of tensors, .numpy()): its values would "
      "leave the graph, and torch refuses")),
]

_INFERENCE_WRITE = re.compile(r"^Inplace update to inference tensor outside InferenceMode is not allowed")
# torch's messages for the in-place backward it refuses with a negative parameter (the knowledge table's).
_NEGATIVE_SLOPE = re.compile("|".join(sorted({"^" + re.escape(fact["error"]) for fact in
                                              load_knowledge().inplace_sign_refused.values()})))

# torch names the autograd node of the view written to: "Output 0 of Split is a view and is being modified inplace".
_VIEW_NODE = re.compile(r"^Output \d+ of (\w+) is a view")

_MEMORY = re.compile(r"can't allocate memory|DefaultCPUAllocator|out of memory|Cannot allocate memory", re.I)


def is_memory_error(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, RuntimeError) and bool(_MEMORY.search(str(exc).split("\n", 1)[0]))


# A Python number, or NumPy's (`np.mean` of a list of floats read out of the graph is a `numpy.float64`).
_NUMBER_BACKWARD = re.compile(r"^'(float|int|numpy\.(?:float|int)\d*)' object has no attribute 'backward'")


def classify_exception(exc: BaseException, user: UserCode, tracer: Tracer | None) -> ProbeFinding | None:
    """The finding an exception proves, or None when it is unrelated to autograd and mutation."""
    if isinstance(exc, AttributeError) and tracer is not None and _NUMBER_BACKWARD.search(str(exc)):
        return _number_backward(exc, user, tracer)
    if not isinstance(exc, RuntimeError):
        return None
    text = str(exc)
    if tracer is not None and text in tracer.emulated:
        return None  # already a realized conflict, with its mutation line
    first = text.split("\n", 1)[0]
    if tracer is not None and tracer.negative_slope is not None and _NEGATIVE_SLOPE.search(first):
        return _negative_slope_finding(tracer.negative_slope, exc, user, text, first)
    if tracer is not None and tracer.grad_mode.inference_write is not None and _INFERENCE_WRITE.search(first):
        return _inference_finding(tracer.grad_mode.inference_write, exc, user, text, first)
    for pattern, code, what in _IMMEDIATE:
        if pattern.search(first):
            sites = traceback_sites(exc.__traceback__, user)
            if not sites:
                return None
            kind, origins, notes = "raised", (), ()
            copy = tracer.cuts.copy_behind_raise(sites[0]) if code == "GG103" and tracer is not None else None
            if copy is not None:  # the roots went through a copy made under no_grad (GG109)
                return copy_raise_finding(copy, sites[0], text)
            if code == "GG103" and tracer is not None and first.startswith("element ") and \
                    tracer.grad_mode.at_backward is not None:
                switched = _grad_mode_finding(tracer.grad_mode.at_backward, sites, text, first)
                if switched is not None:
                    return switched
            if code == "GG103":
                kind = "graph-break"
                origins = _rebuilds_before(exc.__traceback__, user, tracer)
                notes = tuple(Note(o, "a tensor rebuilt from values (no graph) is made here") for o in origins)
            view = _VIEW_NODE.search(first) if code == "GG004" else None
            if view and view.group(1) == "BackwardHookFunction" and tracer is not None:
                hooked = _backward_hook_finding(exc, user, tracer, sites, text, first)
                if hooked is not None:
                    return hooked
            if view and tracer is not None:
                made = _views_made_elsewhere(exc.__traceback__, user, tracer, sites, text, first, view.group(1))
                if made is not None:
                    return made
            if code == "GG003":
                through = _view_of_parameter_finding(exc.__traceback__, user, sites, text, first)
                if through is not None:
                    return through
            return ProbeFinding(code, kind, sites[0], f"{what}; torch raises: {first}", torch_message=text,
                                callers=tuple(sites[1:]), origins=origins, notes=notes,
                                view_node=view.group(1) if view else None)
    return None


def _view_of_parameter_finding(tb, user: UserCode, sites: list[Site], text: str, first: str) -> ProbeFinding | None:
    """torch refuses an in-place write through a view of a leaf that requires grad; when the write goes through a
    name bound on an earlier line to a view of a parameter (``b = conv.bias.view(n, -1)``, then ``b[:, 4] += c``:
    editing a parameter's values in place, an initialisation), the line to change is where the view is taken (take
    it of the detached parameter, or edit under torch.no_grad()).  The name's value at the raise must be a view
    whose base is an ``nn.Parameter``; a view of another leaf (an input that requires grad) keeps the write's line."""
    found = view_before(sites[0])
    if found is None:
        return None
    view, name = found
    value = frame = None
    while tb is not None:
        frame = tb.tb_frame
        if user.is_user(frame.f_code) and tb.tb_lineno == sites[0].line and frame.f_code.co_filename == sites[0].path:
            value = frame.f_locals.get(name)
        tb = tb.tb_next
    del frame
    if not isinstance(value, torch.Tensor) or not isinstance(value._base, torch.nn.Parameter):
        return None
    said = expression_at(view)
    message = (f"`{said or 'this line'}` takes a view of a parameter (a leaf that requires grad), and the in-place "
               f"write through it on line {sites[0].line} raises: {first.split('. ')[0]}; take the view of the "
               "detached parameter (`.detach()`), or make the write under torch.no_grad()")
    return ProbeFinding("GG003", "raised", view, message, torch_message=text, callers=tuple(sites[1:]),
                        origins=(sites[0],), notes=(Note(sites[0], VIEW_NOTE),))


def _views_made_elsewhere(tb, user: UserCode, tracer: Tracer, sites: list[Site], text: str, first: str,
                          node: str) -> ProbeFinding | None:
    """torch refuses an in-place write to one of several views of one tensor (``for t in batch``, ``split``); when
    the write sits in a helper, another function than the one that made the views and handed one over (a
    normalisation written for ordinary tensors), the line to change is where the views are made (iterate over a
    detached or cloned tensor there).  The written tensor is found among the raising frame's local variables."""
    raising = None
    while tb is not None:
        if user.is_user(tb.tb_frame.f_code):
            raising = tb.tb_frame
        tb = tb.tb_next
    if raising is None:
        return None
    made = base = None
    for value in list(raising.f_locals.values()):
        if isinstance(value, torch.Tensor):
            made = tracer.multi_view_site(value)
            if made is not None:
                base = value._base
                break
    del raising
    leaf = isinstance(base, torch.Tensor) and base.is_leaf and base.requires_grad
    if made is None or made == sites[0]:
        return None
    if made.path == sites[0].path and enclosing_function(made) == enclosing_function(sites[0]):
        return None  # made and written in one function: the write's line is the one to change
    iterated = iterated_at(made)
    if iterated:
        message = (f"iterating `{iterated}` here makes several views of one tensor that requires grad (iterating a "
                   f"tensor unbinds it) and hands one to code that writes it in place on line {sites[0].line}, which "
                   f"torch refuses: {first.split('. ')[0]}; iterate over a detached tensor (or a clone) here")
    else:
        said = expression_at(made)
        message = (f"`{said or 'this line'}` makes several views of one tensor that requires grad ({node}) and hands "
                   f"one to code that writes it in place on line {sites[0].line}, which torch refuses: "
                   f"{first.split('. ')[0]}; make the views of a detached tensor (or a clone) here")
    note = LEAF_ROWS_NOTE if leaf and iterated else MULTI_VIEW_NOTE  # (a fact the fix of the rows reads)
    return ProbeFinding("GG004", "raised", made, message, torch_message=text, callers=(),
                        origins=tuple(sites), notes=(Note(sites[0], note),), view_node=node)


def _inference_finding(recorded: tuple, exc: BaseException, user: UserCode, text: str, first: str) -> ProbeFinding:
    """torch refuses an in-place update, outside inference mode, of a tensor made under it: the line to change is
    the one in the user's ``torch.inference_mode()`` block that led to making it."""
    place, write = recorded
    sites = traceback_sites(exc.__traceback__, user)
    write = write or (sites[0] if sites else None)
    said = expression_at(place)
    where = f" (line {write.line})" if write is not None else ""
    notes = (Note(write, f"the in-place update torch refuses: {first.split('.')[0]}"),) if write is not None else ()
    message = (f"`{said or 'this line'}` runs inside a torch.inference_mode() block and makes a tensor that is "
               f"updated in place outside it{where}: torch refuses in-place updates of inference tensors "
               f"({first.split('.')[0]}); make it outside the block, or clone it before updating it")
    return ProbeFinding("GG105", "raised", place, message, torch_message=text,
                        callers=(), origins=(write,) if write is not None else (), notes=notes)


def _negative_slope_finding(recorded: tuple, exc: BaseException, user: UserCode, text: str,
                            first: str) -> ProbeFinding:
    """torch refuses, at backward, the backward of an in-place leaky_relu (elu, celu) with a negative parameter (the
    output cannot tell the input's sign): the line to change is the in-place call (or where its inplace=True module
    was made)."""
    sites, origins, op = recorded
    backward = traceback_sites(exc.__traceback__, user)
    place = origins[0] if origins else sites[0]
    said = expression_at(place)
    notes = [Note(sites[0], f"the in-place {op} runs here")] if place != sites[0] else []
    if backward:
        notes.append(Note(backward[0], f"backward() raises here: {first}"))
    what = "makes a module that runs" if origins else "runs"
    message = (f"`{said or 'this line'}` {what} {op} in place with a negative slope: its backward cannot tell the "
               f"input's sign from the output it kept, and torch raises at backward(): {first.split('. ')[0]}; use "
               f"the out-of-place {op}")
    return ProbeFinding("GG005", "raised", place, message, torch_message=text,
                        callers=tuple(sites[1:]) if place == sites[0] else tuple(sites), origins=tuple(origins[1:]),
                        notes=tuple(notes))


def _grad_mode_finding(at: tuple, sites: list[Site], text: str, first: str) -> ProbeFinding | None:
    """backward() raised on a tensor without a graph, and it started with grad mode off: the line to change is
    where the user's code switched it off (``GradMode``), or the call inside an ``@torch.no_grad()`` function that
    leads to the backward."""
    place, how, switch, backward = at
    if backward is None or backward.line != sites[0].line or backward.path != sites[0].path:
        return None
    said = expression_at(place)
    if how == "computed":
        message = (f"`{said or 'this block'}` switches grad mode off around a computation on tensors that require "
                   f"grad, and the tensor backward() on line {backward.line} starts from was computed from its "
                   f"result: it has no graph, and torch raises: {first}; compute the loss outside the block")
        notes = (Note(backward, f"backward() raises here: {first}"),)
    elif place == switch:
        message = (f"`{said or 'this line'}` switches grad mode off, and it is still off when backward() on line "
                   f"{backward.line} runs: nothing computed since recorded a graph, and torch raises: {first}")
        notes = (Note(backward, f"backward() raises here: {first}"),)
    else:
        message = (f"`{said or 'this call'}` runs inside a function decorated to switch grad mode off (the call on "
                   f"line {switch.line}), and leads to the backward() on line {backward.line}: the loss it computes "
                   f"has no graph, and torch raises: {first}; switch grad mode on around this call "
                   "(torch.enable_grad())")
        notes = (Note(switch, "the decorated function is called here, with grad mode switched off"),
                 Note(backward, f"backward() raises here: {first}"))
    return ProbeFinding("GG103", "raised", place, message, torch_message=text, callers=(),
                        origins=(sites[0],), notes=notes)


def _backward_hook_finding(exc, user: UserCode, tracer: Tracer, sites: list[Site], text: str,
                           first: str) -> ProbeFinding | None:
    """A module full backward hook makes torch wrap the module's output in a ``BackwardHookFunction`` view, which
    a later in-place module (``ReLU(inplace=True)``) may not write.  The line to change is where the hook is
    registered (a tensor hook on the output, from a forward hook, does the same job) or where the in-place
    module is made; the failing call is only where the forward happened to run."""
    registered = list(dict.fromkeys(tracer.hooks.full_registered))
    if not registered:
        return None
    inplace = []
    tb = exc.__traceback__
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    inplace = _inplace_origins(frames)
    del frames
    notes = [Note(s, "the module whose output is hooked is registered here") for s in registered[1:3]]
    notes += [Note(o, "the module that writes in place (inplace=True) is made here") for o in inplace]
    notes.append(Note(sites[0], f"torch raises here: {first}"))
    message = ("a full backward hook registered here makes torch wrap the module's output in a view "
               "(BackwardHookFunction) that the next module, which writes in place, may not modify; torch raises "
               f"\"{first.split('. ')[0]}\". Register a tensor hook on the output from a forward hook instead "
               "(output.register_hook), or make the following module out of place")
    return ProbeFinding("GG004", "raised", registered[0], message, torch_message=text, callers=tuple(sites),
                        origins=tuple(inplace), notes=tuple(notes), view_node="BackwardHookFunction")


def _number_backward(exc: BaseException, user: UserCode, tracer: Tracer) -> ProbeFinding | None:
    """``loss.backward()`` on a Python number: the loss was accumulated from values read out of the graph
    (``.item()``, ``float(t)``), the graph break is the read, in the function that called backward()."""
    code = None
    tb = exc.__traceback__
    while tb is not None:
        if user.is_user(tb.tb_frame.f_code):
            code = tb.tb_frame.f_code
        tb = tb.tb_next
    sites = traceback_sites(exc.__traceback__, user)
    if code is None or not sites:
        return None
    read = next((site for code_id, site in reversed(tracer.scalar_reads) if code_id == id(code)), None)
    if read is None:
        return None
    first = str(exc).split("\n", 1)[0]
    message = ("the value read out of a tensor that requires grad here (`.item()`, `float()`) is a plain number: "
               f"the loss accumulated from it has no graph, and backward() on line {sites[0].line} fails ({first}); "
               "keep the tensor in the loss")
    return ProbeFinding("GG103", "graph-break", read, message, torch_message=None, callers=(),
                        origins=(sites[0],), notes=(Note(sites[0], f"backward() is called on a number here: {first}"),))


def _rebuilds_before(tb, user: UserCode, tracer: Tracer | None) -> tuple[Site, ...]:
    """Where the function that called backward() made tensors out of plain values, latest first."""
    if tracer is None:
        return ()
    code = None
    while tb is not None:
        if user.is_user(tb.tb_frame.f_code):
            code = tb.tb_frame.f_code
        tb = tb.tb_next
    if code is None:
        return ()
    seen: list[Site] = []
    for code_id, site in reversed(tracer.rebuilds):
        if code_id == id(code) and all(s.line != site.line for s in seen):
            seen.append(site)
    return tuple(seen[:3])


def exception_line(exc: BaseException, user: UserCode) -> int | None:
    sites = traceback_sites(exc.__traceback__, user)
    return sites[0].line if sites else None
