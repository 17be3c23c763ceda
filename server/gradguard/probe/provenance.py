"""Graph breaks the probe sees: values read out of a tensor that requires grad, followed until a
``backward()`` starts from a tensor rebuilt from them (rule GG103).  Imports torch.

- A *read* takes the values out of a tensor that requires grad, with grad mode on: ``.item()`` and
  ``float(t)`` (the dispatch mode sees ``_local_scalar_dense``), ``.tolist()``, and ``.numpy()`` of a
  tensor ``.detach()``-ed from one.
- A *rebuild* makes a tensor of read values: ``torch.tensor``, ``torch.as_tensor``, ``torch.asarray``,
  ``torch.from_numpy`` or ``t.new_tensor`` of read values, and ``torch.tensor``/``new_tensor`` of
  tensors that require grad (``torch.tensor([loss_a, loss_b])``); and any op that takes a read float
  as an operand (``alpha * h`` after ``alpha = float(gate)``).  Every later op passes the mark on to
  its outputs.
- A backward that starts from a marked tensor has lost the gradient through those values: a GG103
  finding at the rebuild's line (for a float operand, at the line that read it).

Python numbers cannot carry a mark, so a float is recognised by its exact value, and integral values
(0.0, 3.0...) are never matched.  A NumPy array is marked by its type: ``.numpy()`` of a detached
tensor returns a view of an ndarray subclass, which ufuncs and most NumPy functions keep; ``np.asarray``,
``np.array`` and arithmetic on scalars drop it.  That subclass is the one difference the user's code
could notice under the probe (``type(a) is np.ndarray`` is False).

Nothing here costs anything before the first read: the tracer calls ``on_op`` only once ``busy``.
"""

from __future__ import annotations

import math
import sys
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from .frames import UserCode, frame_site, user_frame
from .kept import forgetter
from .merge import REBUILT_NOTE
from .model import Note, ProbeFinding, Site
from .source import expression_at

try:
    import numpy as np
except ImportError:  # torch runs without NumPy; then nothing can be read into an array
    np = None

_Tensor = torch.Tensor
_FLOAT_LIMIT = 4096  # read floats remembered, the oldest forgotten first
_SCAN_LIMIT = 256  # elements of nested lists looked at to decide whether a factory rebuilds
_PER_TENSOR = 3  # rebuilds remembered per marked tensor
_READ_FROM = 32  # tensors remembered per line that reads numbers out of them
_GRAPH_LIMIT = 100_000  # nodes of a backward's graph looked at for the tensors numbers were read from


@dataclass(frozen=True)
class Rebuild:
    """Why a tensor is marked: the finding's line, and the other line involved (where the values were
    read, or where a read float went back into tensor math)."""

    site: Site
    how: str
    other: Site | None = None
    other_note: str = ""


if np is not None:

    class ReadArray(np.ndarray):
        """An array of values read out of the graph.  NumPy keeps the subclass through ufuncs, slicing
        and most functions; a result NumPy makes a scalar stays a plain scalar."""

        gradguard_read: Site | None = None
        # Set while a probe runs: told of each scalar a reduction makes of read values (``np.sum(a)``), so
        # that the scalar is still known by its value when it is rebuilt into a tensor.
        on_scalar: Any = None
        # Set while a probe runs: told of each array of read values NumPy makes (its memory may become a tensor's
        # without a factory the probe wraps: the legacy `torch.FloatTensor(array)` shares it).
        on_array: Any = None

        def __array_finalize__(self, obj):
            read = self.gradguard_read = getattr(obj, "gradguard_read", None)
            if read is not None and ReadArray.on_array is not None:
                ReadArray.on_array(self, read)

        def __array_function__(self, func, types, args, kwargs):
            # NumPy functions that build a new base-class array (`np.einsum`, `np.concatenate`...) would drop the
            # mark: their result is made of read values too.
            out = super().__array_function__(func, types, args, kwargs)
            read = self.gradguard_read
            if read is None or isinstance(out, ReadArray):
                return out
            if isinstance(out, np.ndarray):
                out = out.view(ReadArray)
                out.gradguard_read = read
                if ReadArray.on_array is not None:
                    ReadArray.on_array(out, read)
            elif isinstance(out, np.floating) and ReadArray.on_scalar is not None:
                ReadArray.on_scalar(out, read)
            return out

        def __array_wrap__(self, arr, context=None, return_scalar=False):
            if return_scalar:
                value = arr[()]
                if ReadArray.on_scalar is not None and self.gradguard_read is not None:
                    ReadArray.on_scalar(value, self.gradguard_read)
                return value
            return super().__array_wrap__(arr, context, return_scalar)

    def _reduction(name):
        method = getattr(np.ndarray, name)

        def reduce(self, *args, **kwargs):
            # `a.mean()` divides the scalar its sum made after the sum returned: the final scalar is told here.
            out = method(self, *args, **kwargs)
            read = getattr(self, "gradguard_read", None)
            if read is not None and ReadArray.on_scalar is not None and isinstance(out, (np.floating, float)):
                ReadArray.on_scalar(out, read)
            return out

        reduce.__name__ = name
        return reduce

    for _name in ("mean", "std", "var", "sum", "prod", "max", "min", "item", "dot", "trace"):
        setattr(ReadArray, _name, _reduction(_name))

else:  # pragma: no cover - NumPy is installed wherever torch's wheels are
    ReadArray = None


def _is_number(value: float) -> bool:
    """Whether a float is distinctive enough to be recognised by its value."""
    return math.isfinite(value) and not value.is_integer()


class Provenance:
    """One per tracer.  ``install()`` wraps the factories and readers; the tracer reports reads,
    detaches and ops; ``on_backward`` turns a marked root into a finding in ``graph_breaks``."""

    def __init__(self, user: UserCode, graph_breaks: dict[tuple, ProbeFinding], errors: list[str]):
        self.user = user
        self.graph_breaks = graph_breaks  # shared with the tracer, keyed by (path, line)
        self.busy = False
        self.floats: dict[float, Site] = {}
        # The tensors numbers were read out of (`float(v)`, `v.item()`), by the line that read them (weakly).
        self.read_from: dict[tuple[str, int], list[weakref.ref]] = {}
        self.marked: dict[int, tuple[weakref.ref, tuple[Rebuild, ...]]] = {}
        self.detached: dict[int, tuple[weakref.ref, Site]] = {}
        self.errors = errors  # the tracer's internal errors
        self._patched: list[tuple[Any, str, Any, bool]] = []
        # The memory of the live arrays of read values: address -> (a weak reference to the array, where read).
        self.arrays: dict[int, tuple[weakref.ref, Site]] = {}

    # -- installation (the child process only) --

    def install(self) -> None:
        for owner, name, data_index, tensors_rebuild in (
            (torch, "tensor", 0, True),
            (torch, "as_tensor", 0, False),
            (torch, "asarray", 0, False),
            (torch, "from_numpy", 0, False),
            (_Tensor, "new_tensor", 1, True),
            # The legacy constructor `torch.Tensor(data)` (its class is the tensor type itself: its `__new__`).
            (_Tensor, "__new__", 1, True),
        ):
            self._patch(owner, name, self._factory(getattr(owner, name), name, data_index, tensors_rebuild))
        self._patch(_Tensor, "tolist", self._tolist(_Tensor.tolist))
        if np is not None:
            self._patch(_Tensor, "numpy", self._numpy(_Tensor.numpy))
            ReadArray.on_scalar = self._read_numpy_scalar
            ReadArray.on_array = self._read_array

    def _read_numpy_scalar(self, value, site: Site) -> None:
        if isinstance(value, np.floating) and _is_number(float(value)):
            self._remember(float(value), site)

    def uninstall(self) -> None:
        if ReadArray is not None:
            ReadArray.on_scalar = None
            ReadArray.on_array = None
        while self._patched:
            owner, name, original, own = self._patched.pop()
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)

    def _patch(self, owner, name, wrapper) -> None:
        original = getattr(owner, name)
        self._patched.append((owner, name, original, name in vars(owner)))
        wrapper.__wrapped__ = original
        setattr(owner, name, wrapper)

    def _factory(self, original, name: str, data_index: int, tensors_rebuild: bool):
        provenance = self

        def factory(*args, **kwargs):
            out = original(*args, **kwargs)
            try:
                data = args[data_index] if len(args) > data_index else kwargs.get("data", kwargs.get("obj"))
                reads, inherited = provenance._reads_in(data, tensors_rebuild)
                if reads:
                    frame = user_frame(sys._getframe(1), provenance.user)
                    if frame is not None:
                        site = frame_site(frame)
                        del frame
                        inherited += tuple(_rebuild_at(site, f"`{expression_at(site) or name + '(...)'}`", read)
                                           for read in reads)
                if inherited:
                    provenance._mark(out, inherited)
            except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
                provenance.errors.append(f"{name}: {type(exc).__name__}: {exc}")
            return out

        return factory

    def _tolist(self, original):
        provenance = self

        def tolist(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            try:
                if self.requires_grad and torch.is_grad_enabled():
                    provenance._read_list(out, sys._getframe(1), self)
            except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
                provenance.errors.append(f"tolist: {type(exc).__name__}: {exc}")
            return out

        return tolist

    def _numpy(self, original):
        provenance = self

        def numpy(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            entry = provenance.detached.get(id(self))
            if entry is not None and entry[0]() is self:
                try:
                    frame = user_frame(sys._getframe(1), provenance.user)
                    read = frame_site(frame) if frame is not None else entry[1]
                    del frame
                    marked = out.view(ReadArray)
                    marked.gradguard_read = read
                    provenance._read_array(marked, read)
                    return marked
                except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
                    provenance.errors.append(f"numpy: {type(exc).__name__}: {exc}")
            return out

        return numpy

    def _read_array(self, array, read: Site) -> None:
        try:
            address = array.__array_interface__["data"][0]
            self.arrays[address] = (weakref.ref(array, forgetter(self.arrays, address)), read)
        except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
            self.errors.append(f"array: {type(exc).__name__}: {exc}")

    def on_fresh(self, t, out, frame) -> None:
        """A tensor made from Python data (``lift_fresh``): when its memory is that of a live array of read
        values (a legacy ``torch.FloatTensor(array)`` shares it), it is a rebuild at the user's line ``frame``."""
        entry = self.arrays.get(t.data_ptr())
        if entry is None or entry[0]() is None or self.marked.get(id(out)) is not None:
            return
        site = frame_site(frame)
        self._mark(out, (_rebuild_at(site, f"`{expression_at(site) or 'the tensor'}`", entry[1]),))

    # -- what the tracer reports --

    def read_scalar(self, value, frame, tensor=None) -> None:
        """``_local_scalar_dense`` of ``tensor``, which requires grad, returned ``value`` to ``frame``."""
        if value.__class__ is float and _is_number(value):
            site = frame_site(frame)
            self._remember(value, site)
            self._read_from(site, tensor)

    def _read_from(self, site: Site, tensor) -> None:
        if tensor is not None:
            kept = self.read_from.setdefault((site.path, site.line), [])
            kept.append(weakref.ref(tensor))
            del kept[:-_READ_FROM]

    def read_detached(self, out, frame) -> None:
        """``out`` is a ``.detach()`` of a tensor that requires grad: its ``.numpy()`` is a read."""
        if isinstance(out, _Tensor):
            self._track(self.detached, out, frame_site(frame))

    def on_op(self, func, args, kwargs, out) -> None:
        """Pass marks from an op's inputs (marked tensors, read floats) to its outputs."""
        found: tuple[Rebuild, ...] = ()
        detached = None
        floats, marked = self.floats, self.marked
        for a in (args if not kwargs else (*args, *kwargs.values())):
            cls = a.__class__
            if cls is float:
                if a in floats:
                    found += self._float_operand(floats[a])
            elif cls is list or cls is tuple:
                for b in a:
                    if isinstance(b, _Tensor):
                        entry = marked.get(id(b))
                        if entry is not None and entry[0]() is b:
                            found += entry[1]
            elif isinstance(a, _Tensor):
                key = id(a)
                entry = marked.get(key)
                if entry is not None and entry[0]() is a:
                    found += entry[1]
                entry = self.detached.get(key)
                if entry is not None and entry[0]() is a:
                    detached = entry[1]
        if found:
            self._mark(out, found)
        if detached is not None:
            for t in (out,) if isinstance(out, _Tensor) else out if isinstance(out, (tuple, list)) else ():
                if isinstance(t, _Tensor):
                    self._track(self.detached, t, detached)

    def on_backward(self, roots, frame) -> None:
        """``backward()``/``autograd.grad()`` starts from ``roots``: a marked root is a graph break."""
        for root in roots if isinstance(roots, (tuple, list)) else (roots,):
            entry = self.marked.get(id(root))
            if entry is None or entry[0]() is not root:
                continue
            backward = frame_site(frame) if frame is not None else None
            reached = None
            for rebuild in entry[1]:
                if (rebuild.site.path, rebuild.site.line) in self.read_from:
                    reached = _reached_by(root) if reached is None else reached
                    if self._read_from_reached(rebuild.site, reached):
                        continue  # the tensors read out reach this backward with their graph: the numbers are a constant
                self._report(rebuild, backward)

    def _read_from_reached(self, site: Site, reached: tuple[set[int], set[int]]) -> bool:
        """Whether every tensor still alive that numbers were read out of at ``site`` (one at least) is in the
        backward's graph: its own node (``grad_fn``), or for a leaf its ``AccumulateGrad``."""
        nodes, leaves = reached
        alive = [t for t in (ref() for ref in self.read_from.get((site.path, site.line), ())) if t is not None]
        return bool(alive) and all(
            id(t.grad_fn) in nodes if t.grad_fn is not None else id(t) in leaves for t in alive)

    # -- marks --

    def _float_operand(self, read: Site) -> tuple[Rebuild, ...]:
        frame = user_frame(sys._getframe(2), self.user)
        if frame is None:
            return ()
        use = frame_site(frame)
        del frame
        if use.line == read.line and use.path == read.path:
            return (Rebuild(read, "a number read out of a tensor that requires grad goes back into tensor math"),)
        return (Rebuild(read, "a number read here out of a tensor that requires grad (`float()`, `.item()`) goes "
                              f"back into tensor math on line {use.line}", use, REBUILT_NOTE),)

    def _remember(self, value: float, site: Site) -> None:
        floats = self.floats
        floats[value] = site
        if len(floats) > _FLOAT_LIMIT:
            del floats[next(iter(floats))]
        self.busy = True

    def _read_list(self, values, frame, tensor=None) -> None:
        frame = user_frame(frame, self.user)
        if frame is None:
            return
        site = frame_site(frame)
        del frame
        self._read_from(site, tensor)
        stack, budget = [values], _FLOAT_LIMIT
        while stack and budget > 0:
            item = stack.pop()
            if item.__class__ is float:
                budget -= 1
                if _is_number(item):
                    self._remember(item, site)
            elif item.__class__ is list:
                stack.extend(item)

    def _reads_in(self, data, tensors_rebuild: bool) -> tuple[list[Site | None], tuple[Rebuild, ...]]:
        """Where the values in a factory's ``data`` were read (None for a tensor that requires grad,
        read right there), and the marks of marked tensors in it."""
        reads: list[Site | None] = []
        inherited: tuple[Rebuild, ...] = ()
        stack, budget = [(data, True)], _SCAN_LIMIT
        grad = torch.is_grad_enabled()
        while stack and budget > 0:
            item, top = stack.pop()
            budget -= 1
            cls = item.__class__
            if cls is float or (np is not None and isinstance(item, np.floating)):
                read = self.floats.get(float(item))
                if read is not None:
                    reads.append(read)
            elif cls is list or cls is tuple:
                stack.extend((x, False) for x in item)
            elif isinstance(item, _Tensor):
                entry = self.marked.get(id(item))
                if entry is not None and entry[0]() is item:
                    inherited += entry[1]
                elif item.requires_grad and grad and (tensors_rebuild or not top):
                    reads.append(None)
            elif ReadArray is not None and isinstance(item, ReadArray):
                reads.append(item.gradguard_read)
        return list(dict.fromkeys(reads))[:_PER_TENSOR], inherited

    def _mark(self, out, rebuilds: tuple[Rebuild, ...]) -> None:
        for t in (out,) if isinstance(out, _Tensor) else out if isinstance(out, (tuple, list)) else ():
            if isinstance(t, _Tensor):
                entry = self.marked.get(id(t))
                if entry is not None and entry[0]() is t:
                    rebuilds = tuple(dict.fromkeys(entry[1] + rebuilds))
                self._track(self.marked, t, rebuilds[:_PER_TENSOR])

    def _track(self, table: dict, t, value) -> None:
        key = id(t)
        entry = table.get(key)
        ref = entry[0] if entry is not None and entry[0]() is t else weakref.ref(t, forgetter(table, key))
        table[key] = (ref, value)
        self.busy = True

    def _report(self, rebuild: Rebuild, backward: Site | None) -> None:
        key = (rebuild.site.path, rebuild.site.line)
        if key in self.graph_breaks:
            return
        notes = []
        if rebuild.other is not None:
            notes.append(Note(rebuild.other, rebuild.other_note))
        if backward is not None:
            notes.append(Note(backward, "the backward() that gets no gradient through these values"))
        self.graph_breaks[key] = ProbeFinding(
            "GG103", "graph-break", rebuild.site,
            f"{rebuild.how}, and backward() starts from a tensor made from it: the gradient through these "
            "values is silently lost (a graph break)",
            severity="warning", notes=tuple(notes),
            origins=(rebuild.other,) if rebuild.other is not None else ())


def _reached_by(root) -> tuple[set[int], set[int]]:
    """The ids of the nodes of ``root``'s backward graph, and of the leaves it accumulates into (while it is alive)."""
    fn = getattr(root, "grad_fn", None)
    nodes: set[int] = set()
    leaves: set[int] = set()
    stack = [fn] if fn is not None else []
    while stack and len(nodes) < _GRAPH_LIMIT:
        node = stack.pop()
        if id(node) in nodes:
            continue
        nodes.add(id(node))
        variable = getattr(node, "variable", None)
        if variable is not None:
            leaves.add(id(variable))
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return nodes, leaves


def _rebuild_at(site: Site, call: str, read: Site | None) -> Rebuild:
    if read is None:
        return Rebuild(site, f"{call} copies the values of a tensor that requires grad into a new tensor")
    if read.path == site.path and read.line == site.line:
        return Rebuild(site, f"{call} builds a tensor of values read out of a tensor that requires grad")
    # The values left the graph at the read: that is the line to change (keep the tensor there); the rebuild,
    # where they come back as a constant, is a related location.
    said = expression_at(read)
    return Rebuild(read, f"{'`' + said + '`' if said else 'this line'} reads values out of a tensor that requires "
                         f"grad, and {call} on line {site.line} builds a tensor of them", site, REBUILT_NOTE)
