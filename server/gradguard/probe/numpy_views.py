"""Writes through NumPy arrays that share a tensor's memory.  Imports torch (and NumPy when installed).

``t.numpy()`` and ``torch.from_numpy(a)`` share memory between an array and a tensor.  A write through
the array never reaches torch's dispatcher and moves no version counter, so neither the tracer nor
torch's own check can see it.  Each such array is watched instead (while it lives): a checksum of
its bytes (CRC-32) is taken when the view is made, and while a watched storage matters to a graph --
it is saved for backward by a live graph, or it is a graph tensor's (a ``.detach()`` of one) -- a line
tracer (``sys.settrace``, local to the user's frames) compares it before each line of the user's code
and on each return; a change is the work of the line that ran last.  ``on_write(storage, site)``
tells the tracer, which treats it like any write autograd does not record (a saved tensor changed, a
graph tensor the forward reads afterwards).  The line tracer slows all Python code down (every call
is traced), so it is switched off as soon as no watched storage matters: a NumPy data batch is
traced from its save in the forward to the backward that frees it, not through the optimizer step.
"""

from __future__ import annotations

import sys
import weakref
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
    storage: Any  # a weak reference to the tensor's untyped storage
    array: Any  # a weak reference to the array (once it is gone, nothing writes through it)
    crc: int


class NumpyViews:
    """One per tracer.  ``install()`` wraps ``Tensor.numpy`` and ``torch.from_numpy``."""

    def __init__(self, user: UserCode, on_write: Callable[[Any, Site], None], is_saved: Callable[[int], bool],
                 errors: list[str]):
        self.user = user
        self.on_write = on_write
        self.is_saved = is_saved  # whether a live graph saved a tensor of this storage (by key)
        self.errors = errors
        self.watched: dict[int, Watch] = {}  # storage key -> its watch
        self.graph: dict[int, Any] = {}  # storage key -> a weak reference to a graph tensor's storage
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
            if key in self.watched:
                self._drop(key)
            if self._bytes + array.nbytes > _BYTES:
                return
            self.watched[key] = Watch(weakref.ref(storage), weakref.ref(array), checksum(array))
            self._bytes += array.nbytes
            if len(self.watched) > _WATCHED:
                self._drop(next(iter(self.watched)))
            if self._matters():
                self._start(caller)
        except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
            self.errors.append(f"numpy: {type(exc).__name__}: {exc}")

    def _drop(self, key: int) -> None:
        watch = self.watched.pop(key)
        array = watch.array()
        self._bytes -= array.nbytes if array is not None else 0

    def _matters(self) -> bool:
        graph, is_saved = self.graph, self.is_saved
        for key in self.watched:
            ref = graph.get(key)
            if (ref is not None and ref() is not None) or is_saved(key):
                return True
        return False

    def graph_view(self, t) -> None:
        """``t`` shares the storage of a tensor with a history (it is a ``.detach()`` of one)."""
        storage = t.untyped_storage()
        self.graph[storage._cdata] = weakref.ref(storage)
        if len(self.graph) > _WATCHED:
            del self.graph[next(iter(self.graph))]

    def on_saved(self, key: int, caller) -> int | None:
        """A live graph saved a tensor of storage ``key``: its checksum now if watched (None otherwise); from
        now on a change to it matters, so the line tracer runs."""
        watch = self.watched.get(key)
        array = watch.array() if watch is not None else None
        if array is None:
            return None
        watch.crc = checksum(array)
        self._start(caller)
        return watch.crc

    def check(self) -> None:
        """Compare every watched array with its checksum; a change is the last line's."""
        for key, watch in list(self.watched.items()):
            array, storage = watch.array(), watch.storage()
            if array is None or storage is None:
                self._drop(key)
                continue
            crc = checksum(array)
            if crc != watch.crc:
                watch.crc = crc
                if self.last is not None:
                    code, line = self.last
                    self.on_write(storage, Site(code.co_filename, line))
        if not self._matters():
            self._stop()

    def fingerprint(self, key: int) -> int | None:
        """The checksum now of a watched storage (None when it is not watched)."""
        watch = self.watched.get(key)
        array = watch.array() if watch is not None else None
        return None if array is None else checksum(array)

    # -- the line tracer --

    def pause(self) -> bool:
        """Stop the line tracer for a backward (it runs none of the user's lines but hooks); True if it ran."""
        tracing = self._tracing
        self._stop()
        return tracing

    def resume(self, caller) -> None:
        """After a backward: trace again if a watched storage still matters (a graph kept with retain_graph)."""
        if self._matters():
            self._start(caller)

    def _start(self, caller) -> None:
        if self._tracing:
            return
        self._tracing = True
        self._previous_trace = sys.gettrace()
        sys.settrace(self._global)
        frame = caller
        self.last = None
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
        return self._local if self._tracing else None
