"""Writes through NumPy arrays that share a tensor's memory.  Imports torch (and NumPy when installed).

``t.numpy()`` and ``torch.from_numpy(a)`` share memory between an array and a tensor.  A write through
the array never reaches torch's dispatcher and moves no version counter, so neither the tracer nor
torch's own check can see it.  Each such array is watched instead: a checksum of its bytes (CRC-32)
is taken when the view is made, and while any array is watched a line tracer (``sys.settrace``,
local to the user's frames) compares it before each line of the user's code and on each return; a
change is the work of the line that ran last.  ``on_write(storage, site)`` tells the tracer, which
treats it like any write autograd does not record (a saved tensor changed, a graph tensor the
forward reads afterwards).  Nothing is watched, and nothing costs anything, in a script that makes
no NumPy view.
"""

from __future__ import annotations

import sys
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .frames import UserCode, user_frame
from .model import Site

try:
    import numpy as np
except ImportError:  # pragma: no cover - torch's wheels bring NumPy
    np = None

_Tensor = torch.Tensor
_WATCHED = 64  # arrays watched at once (the oldest are forgotten first)
_BYTES = 64 << 20  # bytes checked before each line, at most (a larger array is not watched)


def checksum(array) -> int:
    """CRC-32 of the array's bytes (a copy only for a non-contiguous view)."""
    data = array if array.flags.c_contiguous else np.ascontiguousarray(array)
    return zlib.crc32(data.reshape(-1).view(np.uint8))


@dataclass
class Watch:
    storage: Any  # the tensor's untyped storage (kept: the array keeps its memory alive anyway)
    array: Any
    crc: int


class NumpyViews:
    """One per tracer.  ``install()`` wraps ``Tensor.numpy`` and ``torch.from_numpy``."""

    def __init__(self, user: UserCode, on_write: Callable[[Any, Site], None], errors: list[str]):
        self.user = user
        self.on_write = on_write
        self.errors = errors
        self.watched: dict[int, Watch] = {}  # storage key -> its watch
        self.last: tuple | None = None  # (code, line) of the user's line that ran last
        self._bytes = 0
        self._tracing = False
        self._previous_trace = None
        self._patched: list[tuple[Any, str, Any]] = []

    # -- installation --

    def install(self) -> None:
        if np is None:
            return
        self._patch(torch, "from_numpy", self._from_numpy)
        self._patch(_Tensor, "numpy", self._numpy)

    def uninstall(self) -> None:
        self._stop()
        while self._patched:
            owner, name, original = self._patched.pop()
            setattr(owner, name, original)

    def _patch(self, owner, name, make) -> None:
        original = getattr(owner, name)
        self._patched.append((owner, name, original))
        wrapper = make(original)
        wrapper.__wrapped__ = original
        setattr(owner, name, wrapper)

    def _from_numpy(self, original):
        views = self

        def from_numpy(array, *args, **kwargs):
            out = original(array, *args, **kwargs)
            views._watch(out, array, sys._getframe(1))
            return out

        return from_numpy

    def _numpy(self, original):
        views = self

        def numpy(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            views._watch(self, out, sys._getframe(1))
            return out

        return numpy

    # -- watching --

    def _watch(self, t, array, caller) -> None:
        try:
            if t.device.type != "cpu" or not isinstance(array, np.ndarray) or array.nbytes == 0:
                return
            if user_frame(caller, self.user) is None:
                return  # a library's own round trip
            storage = t.untyped_storage()
            key = storage._cdata
            known = self.watched.get(key)
            if known is not None:
                known.crc = checksum(known.array)
                return
            if self._bytes + array.nbytes > _BYTES:
                return
            self.watched[key] = Watch(storage, array, checksum(array))
            self._bytes += array.nbytes
            if len(self.watched) > _WATCHED:
                oldest = self.watched.pop(next(iter(self.watched)))
                self._bytes -= oldest.array.nbytes
            self._start(caller)
        except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
            self.errors.append(f"numpy: {type(exc).__name__}: {exc}")

    def check(self) -> None:
        """Compare every watched array with its checksum; a change is the last line's."""
        for watch in self.watched.values():
            crc = checksum(watch.array)
            if crc != watch.crc:
                watch.crc = crc
                if self.last is not None:
                    code, line = self.last
                    self.on_write(watch.storage, Site(code.co_filename, line))

    def fingerprint(self, key: int) -> int | None:
        """The checksum now of a watched storage (None when it is not watched)."""
        watch = self.watched.get(key)
        return None if watch is None else checksum(watch.array)

    # -- the line tracer --

    def _start(self, caller) -> None:
        if self._tracing:
            return
        self._tracing = True
        self._previous_trace = sys.gettrace()
        sys.settrace(self._global)
        frame = caller
        while frame is not None:  # the frames already running get the local tracer too
            if self.user.is_user(frame.f_code):
                frame.f_trace = self._local
                frame.f_trace_lines = True
                if self.last is None:
                    self.last = (frame.f_code, frame.f_lineno)
            frame = frame.f_back

    def _stop(self) -> None:
        if self._tracing:
            sys.settrace(self._previous_trace)
            self._tracing = False

    def _global(self, frame, event, arg):
        return self._local if self.user.is_user(frame.f_code) else None

    def _local(self, frame, event, arg):
        if not self._tracing:
            return None
        if event == "line" or event == "return":
            try:
                self.check()
            except Exception as exc:  # noqa: BLE001
                self.errors.append(f"numpy: {type(exc).__name__}: {exc}")
            if event == "line":
                self.last = (frame.f_code, frame.f_lineno)
        return self._local
