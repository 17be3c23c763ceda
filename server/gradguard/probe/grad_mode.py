"""Where grad mode was switched off, for a ``backward()`` that runs while it is still off (rule GG103).  Imports
torch.

With grad mode off no op records a graph, so a loss computed then has no ``grad_fn`` and its ``backward()`` raises
"element 0 of tensors does not require grad and does not have a grad_fn".  torch's message names the backward; the
line to change is the switch: ``torch.set_grad_enabled(False)`` called as a function (at import time of another
module, say) and never undone, a ``with torch.no_grad():`` block around the training code, or a function decorated
with ``@torch.no_grad()`` (an optimizer's ``step``) that calls the code that computes the loss and runs its
backward (a closure): then the line to change is that call, inside the decorated function.

Every Python-level switch of grad mode goes through a ``set_grad_enabled`` (``no_grad``, ``enable_grad`` and the
decorator forms make one), whose methods are wrapped while the user's code runs: a switch to off by the
user's code (not one of torch's own, an optimizer's ``differentiable`` switch) is remembered with its line, a
context manager's exit restores what was remembered before it.  ``on_backward`` is told of each backward that
starts with grad mode off; ``place`` is then where the switch that is still in effect was made.

A loss can also be computed under a block that has ended (``with torch.no_grad(): loss_q = f(x, fast_weights)``)
and its backward run later with grad mode on.  While a user's switch is in effect, an op that reads a tensor that
requires grad marks its output with the switch's line, and every later op that makes a tensor that does not
require grad from a marked one passes the mark on; a backward whose root is marked and has no graph names that
line.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from .frames import UserCode, code_site, frame_site
from .model import Site

_Tensor = torch.Tensor
_SetGradEnabled = torch.autograd.grad_mode.set_grad_enabled
_InferenceMode = torch.autograd.grad_mode.inference_mode
_compiling = torch.compiler.is_compiling
_KEPT = 256
_MARKS = 4096  # context managers whose entry is remembered (to restore at their exit)
# The files of torch's grad-mode context managers and of their decorator wrapper.
_GRAD_MODE_FILES = (os.path.join("torch", "autograd", "grad_mode.py"), os.path.join("torch", "utils", "_contextlib.py"))


class GradMode:
    """One per tracer.  ``off``: (the switch's site, the decorated function's code or None) while the user's switch
    to off is in effect; ``at_backward``: (the line to change, how it was switched off, the backward's site) for
    the latest backward that started with grad mode off."""

    def __init__(self, user: UserCode, errors: list[str]):
        self.user = user
        self.errors = errors
        self.off: tuple | None = None
        self.entered: dict[int, tuple | None] = {}
        self.at_backward: tuple | None = None
        # A tensor computed, without a graph, from tensors that require grad under the user's switch (or from such
        # a tensor), by the address of its TensorImpl (an intermediate of a composite op gets a new Python object
        # each time the mode sees it) -> the switch's site; the newest _MARKS kept (an address may be reused).
        self.marks: dict[int, Site] = {}
        self.inference: list = []  # the user's torch.inference_mode() blocks entered: (id of the frame, its site)
        self.inference_made: dict[int, Site] = {}  # storage key -> the block's line that led to making it
        # storage key -> a weak reference to that storage: it keeps the key from being reused by another storage
        # while the entry lives (a freed temporary's address given to a buffer made later), and says when it died.
        self._made_refs: dict[int, Any] = {}
        self.inference_write: tuple | None = None  # (where the inference tensor was made, where it is written)
        self._originals: dict = {}

    def install(self) -> None:
        # The methods of `set_grad_enabled`, not `torch._C._set_grad_enabled` itself: TorchDynamo puts that function
        # into the graphs it compiles and recognises it there, so it must stay torch's own.
        cls = _SetGradEnabled
        originals = self._originals = {name: vars(cls)[name] for name in ("__init__", "__enter__", "__exit__",
                                                                          "__call__") if name in vars(cls)}
        mode = self

        def watched(name, original):
            def method(sge, *args, **kwargs):
                if _compiling():
                    return original(sge, *args, **kwargs)  # TorchDynamo tracing: torch's own method, untouched
                try:
                    if name == "__init__":
                        enabled = bool(args[0] if args else kwargs.get("mode"))
                    else:
                        enabled = bool(sge.mode if name == "__enter__" else sge.prev)
                    mode._switch(enabled, sys._getframe(1), sge, name in ("__exit__", "__call__"))
                except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
                    mode.errors.append(f"grad mode: {type(exc).__name__}: {exc}")
                return original(sge, *args, **kwargs)

            method.__wrapped__ = original
            method.__name__ = name
            return method

        for name, original in originals.items():
            setattr(cls, name, watched(name, original))
        enter, leave = self._inference = (_InferenceMode.__enter__, _InferenceMode.__exit__)

        def __enter__(im):
            if not _compiling() and im.mode:
                try:
                    mode._enter_inference(sys._getframe(1))
                except Exception as exc:  # noqa: BLE001
                    mode.errors.append(f"inference mode: {type(exc).__name__}: {exc}")
            return enter(im)

        def __exit__(im, *exc_info):
            if not _compiling() and im.mode and mode.inference:
                mode.inference.pop()
            return leave(im, *exc_info)

        __enter__.__wrapped__, __exit__.__wrapped__ = enter, leave
        _InferenceMode.__enter__, _InferenceMode.__exit__ = __enter__, __exit__

    def uninstall(self) -> None:
        for name, original in getattr(self, "_originals", {}).items():
            setattr(_SetGradEnabled, name, original)
        self._originals = {}
        if getattr(self, "_inference", None):
            _InferenceMode.__enter__, _InferenceMode.__exit__ = self._inference
            self._inference = None

    # -- inference mode: tensors made under it may not be updated in place outside it --

    def _enter_inference(self, frame) -> None:
        while frame is not None and frame.f_code.co_filename.endswith(_GRAD_MODE_FILES):
            frame = frame.f_back
        while frame is not None and not self.user.is_user(frame.f_code):
            frame = frame.f_back
        if frame is None:
            self.inference.append(None)
            return
        self.inference.append((id(frame), frame_site(frame)))

    def on_inference_op(self, out, frame) -> None:
        """An op ran under the user's ``torch.inference_mode()`` block: remember, by storage, the line of the block's
        function that led to each tensor it made."""
        entry = self.inference[-1] if self.inference else None
        if entry is None:
            return
        outs = (out,) if isinstance(out, _Tensor) else out if isinstance(out, (tuple, list)) else ()
        keys = []
        for t in outs:
            if isinstance(t, _Tensor):
                try:
                    key = t.untyped_storage()._cdata
                except Exception:  # noqa: BLE001 - no storage
                    continue
                if key not in self.inference_made:
                    keys.append(key)
                else:
                    ref = self._made_refs.get(key)
                    if ref is not None and ref.expired():
                        keys.append(key)
        if not keys:
            return
        place = None
        while frame is not None:
            if id(frame) == entry[0]:
                place = frame_site(frame)
                break
            frame = frame.f_back
        place = place or entry[1]
        for key in keys:
            self.inference_made[key] = place
        for t in outs:
            if isinstance(t, _Tensor):
                try:
                    key = t.untyped_storage()._cdata
                    if key in keys:
                        self._made_refs[key] = StorageWeakRef(t.untyped_storage())
                except Exception:  # noqa: BLE001 - no storage
                    continue
        while len(self.inference_made) > _MARKS:
            key = next(iter(self.inference_made))
            del self.inference_made[key]
            self._made_refs.pop(key, None)

    def on_write(self, written, frame) -> None:
        """An in-place op outside inference mode is about to write ``written``: an inference tensor the user's block
        made is refused by torch; remember where it was made and where it is written."""
        for t in written:
            if isinstance(t, _Tensor) and t.is_inference():
                place = self.inference_made.get(t.untyped_storage()._cdata)
                if place is not None:
                    while frame is not None and not self.user.is_user(frame.f_code):
                        frame = frame.f_back
                    self.inference_write = (place, frame_site(frame) if frame is not None else None)
                    return

    def _switch(self, enabled: bool, frame, owner, exiting: bool) -> None:
        # torch's frames between the call and the user's code: a context manager's __enter__/__exit__ (no_grad,
        # enable_grad... make a set_grad_enabled of their own), the decorator's wrapper (`decorate_context`).
        decorated = False
        caller = None
        while frame is not None and frame.f_code.co_filename.endswith(_GRAD_MODE_FILES):
            name = frame.f_code.co_name
            if name in ("__enter__", "__exit__"):
                owner, exiting = frame.f_locals.get("self"), name == "__exit__"
            elif name == "decorate_context":
                decorated = True
                caller = id(frame.f_back) if frame.f_back is not None else None
            frame = frame.f_back
        if frame is None or (not decorated and not self.user.is_user(frame.f_code)):
            return  # torch's own switch (an optimizer's `differentiable` default), another library's
        while frame is not None and not self.user.is_user(frame.f_code):
            frame = frame.f_back
        if frame is None:
            return
        if caller is None:
            caller = id(frame)
        key = id(owner) if owner is not None else None
        if exiting:
            if key in self.entered:
                self.off = self.entered.pop(key)
            elif enabled:
                self.off = None
            return
        if key is not None and key not in self.entered:  # set_grad_enabled switches in __init__ and __enter__
            self.entered[key] = self.off
            if len(self.entered) > _KEPT:
                del self.entered[next(iter(self.entered))]
        if enabled:
            self.off = None
        elif self.off is None or torch.is_grad_enabled():
            self.off = (frame_site(frame), decorated, caller)

    def on_op(self, args, out, grad_enabled: bool) -> None:
        """Pass the marks on (see the module's docstring); ``out`` is the op's result."""
        if not isinstance(out, _Tensor) or out.requires_grad:
            return
        off = self.off if not grad_enabled else None
        marks = self.marks
        site = None
        for a in args:
            for t in (a,) if isinstance(a, _Tensor) else a if isinstance(a, (list, tuple)) else ():
                if not isinstance(t, _Tensor):
                    continue
                if t is out:
                    return  # an in-place write (a parameter updated by hand under no_grad): nothing new is made
                if t.requires_grad:
                    if grad_enabled:
                        return  # autograd gives the result a graph
                    if off is not None and site is None:
                        site = off[0]
                elif site is None:
                    site = marks.get(t._cdata)
        if site is None:
            return
        marks.pop(out._cdata, None)
        marks[out._cdata] = site
        if len(marks) > _MARKS:
            del marks[next(iter(marks))]

    def on_graded_backward(self, roots, backward: Site | None) -> None:
        """A backward starts with grad mode on: a root without a graph that is marked names the switch under which
        what it was computed from was computed."""
        self.at_backward = None
        for root in roots if isinstance(roots, (tuple, list)) else (roots,):
            if not isinstance(root, _Tensor) or root.requires_grad:
                continue
            site = self.marks.get(root._cdata)
            if site is not None:
                self.at_backward = (site, "computed", None, backward)
                return
        self.marks.clear()  # a backward that runs: what was computed before it is not the next one's concern

    def on_backward(self, frame, backward: Site | None) -> None:
        """A backward starts with grad mode off, called from the user's ``frame``: remember the line to change."""
        self.at_backward = None
        if self.off is None:
            return
        site, decorated, caller = self.off
        place, how = site, "switched off here"
        if decorated:
            # The decorated function is the frame the decorator's wrapper called from the switching line's frame:
            # its line that leads to this backward is the one to change.
            f = frame
            while f is not None:
                back = f.f_back
                if (back is not None and back.f_code.co_name == "decorate_context" and back.f_back is not None
                        and id(back.f_back) == caller and self.user.is_user(f.f_code)):
                    place = code_site(f.f_code, f.f_lineno, f.f_lasti)
                    how = "runs with grad mode off (a decorated function)"
                    break
                f = back
            del f
        self.at_backward = (place, how, site, backward)
