"""Writes autograd never records, to a tensor of a live graph that the forward then reads.  Imports torch.

A write under ``no_grad``, through ``.data`` or through a ``.detach()`` alias leaves the written tensor's
``grad_fn`` as it was: autograd differentiates the old formula at the new values.  When nothing saved the
tensor (``h = enc(x); h.data[pad] = 0; loss = head(h).sum()``), no version check can ever see it.

The tracer tells ``on_write`` of each such write (storage, the autograd sequence number at that moment,
the user's line) and asks ``on_read`` about the tensors each op with grad mode on reads.  A tensor that
is not a leaf, whose (base's) ``grad_fn`` is *older* than an untracked write to its storage, still carries
the history from before the write: a tracked write (``h[pad] = 0`` in grad mode) would have given it a
newer node.  That read is the proof; a backward that runs after it makes it a finding.  Nothing is
reported when no backward follows (the values never reached a gradient).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch

from .frames import frame_site
from .model import Note, ProbeFinding, Site
from .source import expression_at

_Tensor = torch.Tensor
_next_sequence_nr = torch._C._autograd._get_sequence_nr
_KEPT = 256  # untracked writes remembered (the oldest are forgotten first)
_NUMPY_VIEW = "a NumPy array that shares its memory (made by .numpy() or torch.from_numpy)"


@dataclass
class Write:
    """One untracked write, and what became of it."""

    site: Site
    op: str
    how: str  # "under no_grad" | "through an alias" | "through NumPy"
    sequence_nr: int  # the next autograd node's number when the write ran
    storage: Any  # a weak reference to the written storage (its address may be reused once it is freed)
    call: tuple  # (id of the user's frame, its instruction): a read in the same call is the library's own
    read: Site | None = None  # where the forward first read the graph tensor it changed
    backward: Site | None = None
    count: int = 1


class UntrackedWrites:
    """One per tracer.  ``busy`` is False until the first untracked write (then reads are checked)."""

    def __init__(self):
        self.writes: dict[int, Write] = {}  # storage key -> the latest untracked write to it
        self.read: list[Write] = []  # read by the forward, no backward yet
        self.found: dict[tuple, Write] = {}  # (path, line, column) -> a write a backward then used

    @property
    def busy(self) -> bool:
        return bool(self.writes)

    def on_write(self, storage, frame, op: str, grad_enabled: bool, tracked: bool = False) -> None:
        """``storage`` was written without autograd recording it, by the user's ``frame`` (or a call in it).
        ``tracked``: autograd did record the write on the written tensor itself (a value with a history written
        into a tensor with none, `buf[:k] = h`), whose new node autograd numbered at the write (one below the next
        number, or the next one for a view's CopySlices): that tensor's own history is current; only other tensors of
        the storage (the one `.data` was taken of) keep an older one."""
        how = "through an alias" if grad_enabled else "under no_grad"
        self._record(storage, frame_site(frame), (id(frame), frame.f_lasti), op, how, 1 if tracked else 0)

    def on_numpy_write(self, storage, site: Site) -> None:
        """``storage`` was written through a NumPy array sharing its memory, by the user's line ``site``."""
        self._record(storage, site, ("numpy", site.path, site.line), "numpy", "through NumPy")

    def _record(self, storage, site: Site, call: tuple, op: str, how: str, own: int = 0) -> None:
        key = storage._cdata
        known = self.writes.pop(key, None)
        if known is not None and known.storage() is storage and (known.site.path, known.site.line) == (
                site.path, site.line):
            known.sequence_nr, known.call = _next_sequence_nr() - own, call
            known.count += 1
            self.writes[key] = known
            return
        self.writes[key] = Write(site, op, how, _next_sequence_nr() - own, weakref.ref(storage), call)
        if len(self.writes) > _KEPT:
            del self.writes[next(iter(self.writes))]

    def on_read(self, args, frame_of) -> None:
        """``args`` of an op run with grad mode on; ``frame_of()`` gives the user's frame (called only on a hit)."""
        writes = self.writes
        for a in args:
            if not isinstance(a, _Tensor):
                if a.__class__ in (list, tuple):
                    self.on_read([b for b in a if isinstance(b, _Tensor)], frame_of)
                continue
            base = a._base if a._base is not None else a
            node = base.grad_fn
            if node is None:
                continue
            try:
                storage = a.untyped_storage()
            except Exception:  # noqa: BLE001 - no storage
                continue
            key = storage._cdata
            write = writes.get(key)
            if write is None or node._sequence_nr() >= write.sequence_nr:
                continue
            del writes[key]
            if write.storage() is not storage:
                continue  # that storage was freed; this one reuses its address
            frame = frame_of()
            if frame is None or (id(frame), frame.f_lasti) == write.call:
                continue  # written and read inside one library call (cosine_similarity clamps a norm's clone)
            if write.read is None:
                write.read = frame_site(frame)
            del frame
            self.read.append(write)

    def on_backward(self, backward: Site | None) -> None:
        for write in self.read:
            write.backward = backward
            self.found.setdefault((write.site.path, write.site.line, write.site.column), write)
        self.read = []

    def findings(self, taken: set[tuple[str, int]]) -> list[ProbeFinding]:
        """One finding per writing line, except lines another finding already explains (``taken``)."""
        found = []
        for write in self.found.values():
            if (write.site.path, write.site.line) in taken:
                continue
            said = expression_at(write.site)
            what = f"`{said}`" if said else f"in-place `{write.op}`"
            how = {"under no_grad": "under no_grad", "through NumPy": f"through {_NUMPY_VIEW}"}.get(
                write.how) or _alias_kind(said)
            read_at = f" at line {write.read.line}" if write.read else ""
            backward_at = f" at line {write.backward.line}" if write.backward else ""
            message = (f"{what} changes a tensor of the autograd graph {how}, so autograd does not record it: the "
                       f"forward reads the new values{read_at}, and backward(){backward_at} differentiates as if they "
                       "were unchanged, so the gradients are wrong")
            if write.count > 1:
                message += f" [seen {write.count} times]"
            notes = []
            if write.read:
                notes.append(Note(write.read, "the forward reads the changed tensor here"))
            if write.backward:
                notes.append(Note(write.backward, "backward() computes gradients of the unchanged formula here"))
            found.append(ProbeFinding("GG102", "silent", write.site, message, notes=tuple(notes), op=write.op,
                                      count=write.count, backward=write.backward))
        return found


def _alias_kind(said: str | None) -> str:
    """How the write escaped autograd, as the line says it (both aliases look the same to the dispatcher)."""
    if said and ".data" in said:
        return "through `.data`"
    if said and ".detach()" in said:
        return "through a `.detach()` alias"
    return "through an alias autograd does not track (.data or .detach())"
