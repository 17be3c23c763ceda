"""The child side of the probe: watches torch while the user's code runs.  Imports torch.

Two hooks, both installed only around the user's code:

- ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor autograd saves for backward.  The
  pack hook records its storage, its version and the user's line that caused the save, and returns
  a handle; the handle dies when autograd frees the graph (after backward, or when the graph is
  dropped), which removes the record.  The unpack hook runs when backward needs the tensor.
- a ``TorchDispatchMode`` sees every aten op below autograd.  An op whose schema marks an argument
  as written (``alias_info.is_write``) on a storage that a live saved tensor uses is a *conflict*:
  its user line is recorded at once, before any backward runs.  Ops that write nothing cost one dict
  lookup.

Saved-tensor hooks switch off torch's own version check (torch cannot see through the packed
object), so the unpack hook performs it instead and raises the message torch would have raised
(``test_probe_fixtures`` compares the two on every fixture).  A conflict becomes a finding when a
backward uses the changed tensor: it raises (the version moved) or silently reads the new values (a
write through ``.data`` moves no version).  A conflict whose graph is still alive when the run ends
is reported as ``pending``; one whose graph was dropped unused is forgotten (torch never minds).

Immediate errors (leaf, view of a leaf, multi-output view, no_grad view, graph breaks at
backward) are exceptions: ``classify_exception`` maps them to a rule code and the user's line.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import os
import re
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.autograd.graph import saved_tensors_hooks
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._python_dispatch import _get_current_dispatch_mode as _current_mode
from torch.utils._python_dispatch import _pop_mode_temporarily

from ..knowledge import load_knowledge
from .asked import AskedGradients
from .copies import CopiedParameters
from .cuts import Cuts
from .frames import UserCode, code_site, frame_site, frame_sites, skip_dynamo, user_frame
from .geometry import geometry_of, overlaps
from .grad_hooks import GradientHooks
from .grad_mode import GradMode
from .guarded_freeze import GuardedFreezes
from .kept import forgetter
from .module_flags import ModuleFlags
from .merge import (ALIAS_NOTE, BACKWARD_CALL_NOTE, BUFFER_READ_NOTE, INPUT_NOTE, MODULE_NOTE, RENORM_NOTE,
                    SETTER_NOTE, STALE_USE_NOTE, STEP_CALL_NOTE, STEP_NOTE)
from .model import Note, ProbeFinding, Saving, Site
from .numpy_views import NumpyViews
from .own_stats import NORM_OPS, OwnStatistics
from .provenance import Provenance
from .returned_loss import ReturnedLoss
from .source import accumulates, alias_before, assignments_read_at, attribute_store, enclosing_function, expression_at, rebinding_before, setter_write
from .stale_grads import RESETS, StaleGrads
from .synced import SyncedCopies
from .untracked import UntrackedWrites

_next_sequence_nr = torch._C._autograd._get_sequence_nr
_NO_DISPATCH = torch._C._DisableTorchDispatch
_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_grad_enabled = torch.is_grad_enabled

# Distinct saves remembered per conflict with the nodes that made them (the notes show at most 3 of them).
_SAVES_KEPT = 16
# Nodes whose saving frames are kept once an optimizer step hit a live graph (``Tracer.node_chains``), newest kept.
_CHAINS_KEPT = 200_000
# Nodes looked at when a backward through a graph made stale by an optimizer step is searched for the stale value.
_STALE_WALK = 50_000
# Ops that take the slow path without writing anything (markers compared by identity).
_SCALAR = "scalar"  # _local_scalar_dense: item(), float(t), int(t), bool(t)
_FRESH = "fresh"  # a tensor made from Python data: torch.tensor(...), from_numpy, new_tensor
_DETACH = "detach"  # torch.tensor(t) and t.new_tensor(t) start with one (the probe's own detach skips the mode)
_VIEWS = "views"  # ops that return several views of one tensor (unbind, iteration over a tensor, split, chunk)
_MULTI_VIEW_OPS = frozenset(("unbind", "split", "split_with_sizes", "chunk", "tensor_split", "unsafe_split"))
_MULTI_VIEWS_KEPT = 4096
# OpOverload -> what _classify says about it.
_WRITES: dict[Any, Any] = {}
# The frame that runs a custom autograd.Function (``Function.apply``): it saves the tensors of
# ``ctx.save_for_backward`` after the Function's forward returned, and its forward runs under it.
def _function_apply_code():
    """The code of ``Function.apply`` when torch implements it in Python (a classmethod up to 2.13); None when
    it is a builtin (later releases): no frame is then told apart as a custom Function's ``apply``, and the
    notes that need it (a write inside a Function's forward, its saved inputs) are left out."""
    apply = inspect.getattr_static(torch.autograd.function.Function, "apply", None)
    return getattr(getattr(apply, "__func__", apply), "__code__", None)


_FUNCTION_APPLY = _function_apply_code()


# In-place activations whose backward torch refuses for a negative parameter (the knowledge table's
# ``inplace_sign_refused``: leaky_relu_, elu_, celu_): the aten op -> (its name, the parameter's position).
_SIGN_REFUSED = {getattr(torch.ops.aten, f"{name}_").default: (name, fact["position"])
                 for name, fact in load_knowledge().inplace_sign_refused.items() if hasattr(torch.ops.aten, f"{name}_")}


# The writes that store values into a tensor the user keeps (`buf[t] = v`, `buf[t].copy_(v)`, `buf[idx] = v`); not an
# op's own bookkeeping (BatchNorm's running statistics).
_STORES = frozenset((torch.ops.aten.copy_.default, torch.ops.aten.index_put_.default))


def _classify(func):
    """The written arguments of an op as (index, name, kwarg_only); a marker string for the ops the
    graph-break check watches; () for everything else (the fast path)."""
    name = getattr(func, "__name__", "")
    if name.startswith("_local_scalar_dense"):
        spec = _SCALAR
    elif name.startswith(("lift_fresh", "scalar_tensor")):
        spec = _FRESH
    elif name == "detach.default":
        spec = _DETACH
    elif name.split(".")[0] in _MULTI_VIEW_OPS and not name.startswith("unsafe"):
        spec = _VIEWS
    else:
        try:
            arguments = func._schema.arguments
        except AttributeError:
            spec = ()
        else:
            spec = tuple(
                (i, a.name, a.kwarg_only)
                for i, a in enumerate(arguments)
                if a.alias_info is not None and a.alias_info.is_write
            )
    _WRITES[func] = spec
    return spec


def _op_name(func) -> str:
    try:
        return func.overloadpacket.__name__
    except AttributeError:
        return str(func)


def _node_name(name: str) -> str:
    """torch's messages drop ``Backward`` and a ``0`` overload suffix from ``name()``:
    ``SigmoidBackward0`` -> ``Sigmoid``, ``ClampBackward1`` -> ``Clamp1``."""
    return re.sub(r"Backward(\d*)$", lambda m: "" if m.group(1) in ("", "0") else m.group(1), name)


# dtypes that have a legacy tensor type name; torch's messages print the others as CPUBoolType...
_LEGACY_TYPES = frozenset({torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                           torch.float32, torch.float64})


def _type_string(t) -> str:
    """``Tensor::toString()`` as torch 2.13 prints it in the saved-tensor message."""
    legacy = t.type()  # torch.FloatTensor, torch.cuda.FloatTensor, torch.BoolTensor...
    if t.dtype in _LEGACY_TYPES:
        return legacy
    scalar = legacy.rsplit(".", 1)[-1].removesuffix("Tensor")
    device = {"cpu": "CPU", "cuda": "CUDA"}.get(t.device.type, t.device.type.upper())
    return f"{device}{scalar}Type"


# --- modules made with inplace=True ------------------------------------------------------------------

_MODULE_SITES: "weakref.WeakKeyDictionary[Any, Site]" = weakref.WeakKeyDictionary()


def watch_inplace_modules(user: UserCode) -> None:
    """Remember where each ``nn`` module constructed with ``inplace=True`` was made (its line is where
    the static rule GG005 points).  Patches the classes of this process only: call in the child."""
    import inspect

    patched = set()
    for name in dir(torch.nn):
        cls = getattr(torch.nn, name)
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
            continue
        try:
            if "inplace" not in inspect.signature(cls.__init__).parameters:
                continue
        except (TypeError, ValueError):
            continue
        owner = next(c for c in cls.__mro__ if "__init__" in vars(c))  # Dropout's is _DropoutNd's
        if owner in patched or owner is torch.nn.Module:
            continue
        patched.add(owner)
        original = owner.__init__

        def __init__(self, *args, __original=original, **kwargs):
            __original(self, *args, **kwargs)
            if getattr(self, "inplace", False) and self not in _MODULE_SITES:
                sites, _ = frame_sites(sys._getframe(1), user, limit=1)
                if sites:
                    try:
                        _MODULE_SITES[self] = sites[0]
                    except TypeError:
                        pass

        __init__.__wrapped__ = original
        owner.__init__ = __init__


# In-place activations: called as `F.relu_(x)` / `torch.relu_(x)` they are what rule GG005 means.
_INPLACE_ACTIVATIONS = frozenset({
    "relu_", "relu6_", "leaky_relu_", "elu_", "celu_", "selu_", "silu_", "mish_", "hardtanh_", "hardswish_",
    "hardsigmoid_", "threshold_", "rrelu_", "rrelu_with_noise_", "dropout_", "alpha_dropout_",
    "feature_dropout_", "feature_alpha_dropout_",
})
_FUNCTIONAL_CALL = re.compile(r"(?:^|[^\w.])(?:F|functional|torch|nn\.functional|torch\.nn\.functional)\.\w+_\s*\(")


def _source_segment(site: Site) -> str:
    import linecache

    text = linecache.getline(site.path, site.line)
    if site.column and site.end_line == site.line and site.end_column > site.column:
        return text[site.column - 1:site.end_column - 1]
    return text


# --- records --------------------------------------------------------------------------------------


class Saved:
    """One tensor autograd saved for backward."""

    __slots__ = ("serial", "key", "value", "version", "is_output", "node", "output_nr", "site", "op",
                 "conflicts", "role", "made_by", "sequence_nr", "fingerprint", "chain")

    def __init__(self, serial, key, value, version, is_output, node, output_nr, site, op, role="input",
                 made_by=None, sequence_nr=None):
        self.serial = serial
        self.key = key
        self.value = value  # the original tensor, or for an output a detached alias (no reference cycle)
        self.version = version
        self.is_output = is_output
        self.node = node
        self.output_nr = output_nr
        self.site = site  # (code, line, lasti) of the user's code that caused the save
        self.op = op
        self.conflicts: list[tuple[Conflict, tuple]] | None = None  # (conflict, geometry of the write)
        self.role = role  # "output" of the saving op, a "weight" (a Parameter or a view of one), or an "input"
        self.made_by = made_by  # grad_fn.name() of a saved input when it was saved (None for a leaf)
        # The sequence number of the autograd node that saved it: a node gets its number before it saves
        # anything, so it is the newest number when the pack hook runs.  Tells which graph holds the save.
        self.sequence_nr = sequence_nr
        self.fingerprint: int | None = None  # a checksum of its bytes, for storages NumPy arrays share
        # For a weight: the user's frames that saved it, outer ones too ((code, line, lasti), innermost first),
        # to find where the forward ran in the function that also steps the optimizer (``_order_to_change``).
        self.chain: tuple = ()

    def saving(self) -> "tuple":
        """What a finding says about this save (a tuple: a record would keep the tensor alive)."""
        return (self.site, self.op, self.role, self.made_by)


class _Handle:
    """What autograd keeps instead of the tensor; its death means the graph let the tensor go."""

    __slots__ = ("rec", "tracer")

    def __init__(self, rec: Saved, tracer: "Tracer"):
        self.rec = rec
        self.tracer = tracer

    def __del__(self):
        try:
            self.tracer._release(self.rec)
        except Exception:  # noqa: BLE001 - never raise from a finalizer (interpreter shutdown, ...)
            pass


@dataclass
class Conflict:
    """An op wrote to a storage that live saved tensors use.  One per (op, mutation site)."""

    op: str
    sites: list[Site]
    code_hint: str  # the rule the call looks like: GG001, GG005 (in-place activation), GG101 (optimizer...)
    origins: list[Site]  # other lines that are part of it (where the inplace=True module was made)
    first: Saved  # one of the saved tensors it hit (to read its version at the end)
    first_overlaps: bool  # whether the write touched that tensor's elements (not just its storage)
    saves: list[tuple] = field(default_factory=list)  # Saved.saving() of the hit saved tensors (up to 3 shown)
    # Saved.saving() of the hit saved tensors -> the sequence numbers of the nodes that saved them (to keep,
    # once a backward used one, only the saves of the graph that backward runs).
    nodes: dict[tuple, set] = field(default_factory=dict)
    count: int = 0
    alive: int = 0  # how many hit saved tensors are still held by a graph
    realized: str | None = None  # "raised" | "silent" once a backward used a hit tensor
    backward: list[Site] = field(default_factory=list)
    torch_message: str | None = None
    realized_save: tuple | None = None  # Saved.saving() of the one a backward used first
    realized_chain: tuple = ()  # Saved.chain of that one
    # In a custom Function's forward, a write to one of its inputs through a name rebound by a call that returned
    # the input itself (``x = x.float()`` on a float32 input): (the rebinding line, the Function's name).
    input_alias: tuple | None = None
    through: str = "a write through `.data`"  # how a write that moves no version got past autograd
    # For an optimizer step: the autograd sequence number when it last wrote (nodes numbered below it were built
    # before the step), and, once a backward built after the step ran into the stale graph, (the line of the
    # backward's function that joined a value computed before the step to the new graph, where that value was
    # computed when known): see ``Tracer._stale_use``.
    step_nr: int = 0
    stale: tuple | None = None
    # For an optimizer step whose change a backward ran into: the other optimizer steps (other lines) that changed
    # saves of the same backward's graph (several steps between one forward and its backward); ``folded`` on those.
    co_steps: list = field(default_factory=list)
    folded: bool = False
    # For an optimizer step: the storages it wrote (the parameters), to know a graph built after it from them.
    written: set = field(default_factory=set)


@dataclass
class Cut:
    """A value read out of a tensor that requires grad (``.item()``, ``float(t)``) with grad mode on."""

    site: Site
    reused: bool = False


# --- the tracer -----------------------------------------------------------------------------------


class Tracer(TorchDispatchMode):
    """Install with ``with tracer:`` around the user's code; then ``findings()``."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Otherwise torch wraps __torch_dispatch__ in torch._disable_dynamo: ~10 us on every aten op,
        # more than the tracer's own work on the fast path.  `skip_dynamo` below keeps Dynamo out of it instead.
        return False

    def __init__(self, user: UserCode):
        super().__init__()
        self.user = user
        self.pending: dict[int, dict[int, Saved]] = {}
        self.serial = 0
        self.unnamed: list[Saved] = []  # saved inputs of the op about to be dispatched
        self.last_func = None
        self.conflicts: dict[tuple, Conflict] = {}
        self.unexplained: dict[tuple, ProbeFinding] = {}
        self.emulated: set[str] = set()  # messages the unpack hook raised in torch's name
        self.internal_errors: list[str] = []
        self.cut: Cut | None = None  # the latest value read out of the graph, until its line is left
        self.graph_breaks: dict[tuple, ProbeFinding] = {}
        self.realized_now: list[Conflict] = []  # conflicts a backward used during the current backward call
        self.rebuilds: list[tuple[int, Site]] = []  # (code id, site) of tensors made from data or cut values
        self.scalar_reads: list[tuple[int, Site]] = []  # (code id, site) of `.item()`/`float(t)` reads, latest last
        # The views an op that returns several views (unbind, split...) made of a tensor that requires grad, with grad
        # mode on: id -> (a weak reference, the user's site that made them); torch refuses in-place writes to them.
        self.multi_views: dict[int, tuple[weakref.ref, Site]] = {}
        self._hooks = saved_tensors_hooks(self._pack, self._unpack)
        self.provenance = Provenance(user, self.graph_breaks, self.internal_errors)
        self.untracked = UntrackedWrites()  # writes autograd does not record, to tensors of a live graph
        # user hooks and custom Functions' backward: writes to their gradient, and to saved tensors
        self.hooks = GradientHooks(user, self.internal_errors, self.backward_write)
        self.asked = AskedGradients(user, self.internal_errors)  # gradients asked for of tensors written in place
        self.numpy = NumpyViews(user, self._numpy_write, self.pending.__contains__,  # writes through NumPy views
                                self.internal_errors)
        self.cuts = Cuts(user, self.internal_errors)  # .detach()/.data that starve trained parameters
        self.flags = ModuleFlags(user, self.internal_errors)  # `module.requires_grad = False`: a plain attribute
        self.guarded = GuardedFreezes(user, self.internal_errors)  # `if p.requires_grad: p.requires_grad = on`
        self.cuts.optimizer_of = self.flags.optimizer_of
        self.cuts.replaced_out = self.flags.replaced_out
        self.stale_grads = StaleGrads(user, self.internal_errors)  # gradients a step applied, added to, applied again
        self.grad_mode = GradMode(user, self.internal_errors)  # where grad mode was switched off, for a backward then
        self.returned = ReturnedLoss(user, self.internal_errors)  # a training_step that computes a loss, returns None
        self.copied = CopiedParameters(user, self.internal_errors)  # an optimizer left holding a deep copy's originals
        self.copied.optimizer_of = self.flags.optimizer_of
        self.own_stats = OwnStatistics(user, self.internal_errors)  # batch norm handed its input's own statistics
        self.synced = SyncedCopies(user, self.internal_errors)  # a loaded copy replaced by the module it copies
        self.synced.optimizer_of = self.flags.optimizer_of
        self.cuts.on_data = self.provenance.read_detached  # `.data.numpy()` is a read, as `.detach().numpy()` is
        self.ops = 0  # aten ops seen: none means the target only defined things
        self.function_saves: dict = {}  # custom Function class -> (code, line, lasti) of its save_for_backward call
        self.detached_in_place: dict[int, list[Site]] = {}  # storage key -> where `.detach_()` cut a tensor's history
        # The latest in-place leaky_relu/elu/celu with a negative parameter (its backward cannot tell the input's sign
        # from the output; torch raises only when the backward runs): (the user's sites, the inplace=True modules'
        # lines, the op's name).
        self.negative_slope: tuple | None = None
        # Once an optimizer step wrote a tensor a live graph saved, the pack hook keeps the user's frames of every
        # save by the sequence number of its node (innermost first), so that a backward that then fails can name
        # the line that used a value from before the step (``_stale_use``).  Off until then: no cost.
        self.chains = False
        self.node_chains: dict[int, tuple] = {}
        # Writes of values with a history into part of a tensor (``buf[i] = v``): the number of the CopySlices node
        # autograd makes for each (the next number when the kernel runs) -> the user's frame (code, line, lasti).
        self.view_writes: dict[int, tuple] = {}
        # Optimizer steps that wrote tensors a live graph saved, while that graph lives (``_mixing``).
        self.stale_steps: list[Conflict] = []

    # -- installation --

    def __enter__(self):
        self._hooks.__enter__()
        try:
            entered = super().__enter__()
        except BaseException:
            self._hooks.__exit__(None, None, None)
            raise
        self._engine = torch.autograd._engine_run_backward
        torch.autograd._engine_run_backward = self._backward
        self._detach_ = _Tensor.detach_
        self._detach_own = "detach_" in vars(_Tensor)
        _Tensor.detach_ = self._detach_in_place(self._detach_)
        self._save_for_backward = torch.autograd.function.FunctionCtx.save_for_backward
        torch.autograd.function.FunctionCtx.save_for_backward = self._function_save(self._save_for_backward)
        self.provenance.install()
        self.numpy.install()
        self.hooks.install()
        self.asked.install()
        self.cuts.install()
        self.flags.install()
        self.guarded.install()
        self.grad_mode.install()
        self.stale_grads.install()
        self.returned.install()
        self.copied.install()
        self.synced.install()
        return entered

    def __exit__(self, *exc):
        self.synced.uninstall()
        self.copied.uninstall()
        self.returned.uninstall()
        self.stale_grads.uninstall()
        self.grad_mode.uninstall()
        self.guarded.uninstall()
        self.flags.uninstall()
        self.cuts.uninstall()
        self.asked.uninstall()
        self.hooks.uninstall()
        self.numpy.uninstall()
        self.provenance.uninstall()
        torch.autograd.function.FunctionCtx.save_for_backward = self._save_for_backward
        if self._detach_own:
            _Tensor.detach_ = self._detach_
        else:
            del _Tensor.detach_
        torch.autograd._engine_run_backward = self._engine
        try:
            return super().__exit__(*exc)
        finally:
            self._hooks.__exit__(*exc)

    def _backward(self, roots, *args, **kwargs):
        """``backward()`` and ``autograd.grad()`` run without the dispatch mode: the backward graph's own
        ops write nothing the user saved (the unpack hooks still run), and watching them would double
        the tracer's cost.  Mutations made by backward hooks or custom Functions' backward are not seen."""
        if _current_mode() is not self:
            return self._engine(roots, *args, **kwargs)
        self.returned.on_backward()
        if self.provenance.busy:
            try:
                self.provenance.on_backward(roots, self._user_frame(sys._getframe(1)))
            except Exception as exc:  # noqa: BLE001
                self.internal_errors.append(f"backward: {type(exc).__name__}: {exc}")
        if self.untracked.read:
            try:
                frame = self._user_frame(sys._getframe(1))
                self.untracked.on_backward(frame_site(frame) if frame is not None else None)
                del frame
            except Exception as exc:  # noqa: BLE001
                self.internal_errors.append(f"untracked: {type(exc).__name__}: {exc}")
        outer, self.realized_now = self.realized_now, []
        outer_backward = self.hooks.backward
        codes = ()
        try:
            frame = self._user_frame(sys._getframe(1))
            self.hooks.backward = frame_site(frame) if frame is not None else None
            if self.chains:
                codes = _user_codes(frame, self.user)
            del frame
            self.asked.on_backward(roots, args[3] if len(args) > 3 else kwargs.get("inputs"), self.hooks.backward)
            if self.cuts.cuts:
                self.cuts.on_backward(roots, self.hooks.backward)
            if self.own_stats.pending:
                self.own_stats.on_backward(self.hooks.backward)
            if self.flags.pending or self.flags.replaced:
                self.flags.on_backward(roots, self.hooks.backward)
            if self.guarded.pending:
                self.guarded.on_backward(self.hooks.backward)
            if not _grad_enabled():
                self.grad_mode.on_backward(sys._getframe(1), self.hooks.backward)
            elif self.grad_mode.marks:
                self.grad_mode.on_graded_backward(roots, self.hooks.backward)
        except Exception as exc:  # noqa: BLE001
            self.internal_errors.append(f"hooks: {type(exc).__name__}: {exc}")
        traced_lines = self.numpy.pause()
        grads = None
        if self.stale_grads.watched:
            try:
                grads = self.stale_grads.before_backward()
            except Exception as exc:  # noqa: BLE001
                self.internal_errors.append(f"stale grads: {type(exc).__name__}: {exc}")
        raised = True
        try:
            with _pop_mode_temporarily():
                out = self._engine(roots, *args, **kwargs)
            raised = False
            return out
        finally:
            if self.cuts.mixed or self.cuts.dead_now:
                self.cuts.after_backward(raised)
            if grads:
                try:
                    self.stale_grads.after_backward(grads, sys._getframe(1))
                except Exception as exc:  # noqa: BLE001
                    self.internal_errors.append(f"stale grads: {type(exc).__name__}: {exc}")
            if traced_lines:
                self.numpy.resume(sys._getframe(1))
            self.hooks.backward = outer_backward
            realized, self.realized_now = self.realized_now, outer
            if realized:
                try:
                    self._keep_saves_of_graph(realized, roots)
                    for c in realized:
                        if c.code_hint == "GG101" and c.stale is None and codes:
                            c.stale = self._stale_use(c, roots, codes)
                    self._steps_of_one_graph(realized, roots)
                except Exception as exc:  # noqa: BLE001
                    self.internal_errors.append(f"graph: {type(exc).__name__}: {exc}")

    def _steps_of_one_graph(self, realized: list["Conflict"], roots) -> None:
        """For each optimizer step a backward ran into: the other steps (other lines) that changed saves of the graph
        under the same roots -- several steps between a forward and its backward."""
        steps = [c for c in realized if c.code_hint == "GG101" and not c.co_steps]
        if not steps:
            return
        others = [c for c in self.conflicts.values() if c.code_hint == "GG101" and c.nodes]
        if len(others) < 2:
            return
        reached = _graph_sequence_nrs(roots)
        for c in steps:
            here = (c.sites[0].path, c.sites[0].line)
            c.co_steps = [o for o in others if o is not c and (o.sites[0].path, o.sites[0].line) != here
                          and any(nrs & reached for nrs in o.nodes.values())]

    def _function_save(self, original):
        """``ctx.save_for_backward`` of a custom Function, watched: torch packs the tensors only after the forward
        returned, so the pack hook cannot see the user's line that saved them; remember it per Function class."""
        tracer = self

        def save_for_backward(ctx, *tensors):
            try:
                frame = user_frame(sys._getframe(1), tracer.user)
                if frame is not None:
                    tracer.function_saves[getattr(ctx, "_forward_cls", None)] = (
                        frame.f_code, frame.f_lineno, frame.f_lasti)
                del frame
            except Exception as exc:  # noqa: BLE001
                tracer.internal_errors.append(f"save: {type(exc).__name__}: {exc}")
            return original(ctx, *tensors)

        save_for_backward.__wrapped__ = original
        return save_for_backward

    def _keep_saves_of_graph(self, conflicts: list["Conflict"], roots) -> None:
        """A write can hit saves of several graphs (a GAN's `D(real)` and `D(fake)` both save D's weights);
        the backward that used one reads only the graph under its roots.  Keep the saves of that graph, so
        that "saved for backward here" points at the forward that fails, not at another one."""
        reached = _graph_sequence_nrs(roots)
        for c in conflicts:
            if c.realized_save is None or not c.nodes.get(c.realized_save, set()) & reached:
                continue  # the node that saved it is not known (a custom Function...): keep every save
            in_graph = [s for s, nrs in c.nodes.items() if nrs & reached]
            c.saves = ([c.realized_save] + [s for s in in_graph if s != c.realized_save])[:3]

    def _note_node(self) -> None:
        """Keep the user's frames that run the op being dispatched, by the number of the autograd node built for
        it (autograd numbers the node before it calls the kernel; a node that already has frames keeps them)."""
        nr = _next_sequence_nr() - 1
        chains = self.node_chains
        if nr in chains:
            return
        try:
            chain = []
            frame = sys._getframe(2)
            user = self.user
            while frame is not None and len(chain) < 8:
                if user.is_user(frame.f_code):
                    chain.append((frame.f_code, frame.f_lineno, frame.f_lasti))
                frame = frame.f_back
            del frame
            chains[nr] = tuple(chain)
            if len(chains) > _CHAINS_KEPT:
                del chains[next(iter(chains))]
        except Exception as exc:  # noqa: BLE001
            self.internal_errors.append(f"node: {type(exc).__name__}: {exc}")

    def _stale_use(self, c: Conflict, roots, codes: tuple) -> tuple | None:
        """A backward whose roots were built after the optimizer step ``c`` ran into a graph built before it: the
        step did not come between a forward and its backward; a value computed before the step was used again
        after it.  The edge that proves it leads from a node numbered after the step to one numbered before it,
        above the node that saved what the step changed.  Returns (the line of the backward's function, ``codes``
        innermost first, that built the newer node, the line there that built the older one or None), or None."""
        step = c.step_nr
        wanted = c.nodes.get(c.realized_save) if c.realized_save is not None else None
        if not wanted:
            wanted = set().union(*c.nodes.values()) if c.nodes else set()
        if not wanted:
            return None
        start = []
        for root in roots:
            node = root.grad_fn if isinstance(root, _Tensor) else getattr(root, "node", None)
            if node is not None and step <= node._sequence_nr() < _NO_SEQUENCE:
                start.append(node)
        if not start:
            return None  # the graph was built before the step: the step's own line is the one to move
        parent: dict[int, Any] = {}
        seen = {n._sequence_nr() for n in start}
        queue, crossings = list(start), []
        while queue and len(seen) < _STALE_WALK:
            node = queue.pop(0)
            for child, _ in node.next_functions:
                if child is None:
                    continue
                nr = child._sequence_nr()
                if nr >= _NO_SEQUENCE or nr in seen:
                    continue
                seen.add(nr)
                parent[nr] = node
                if nr < step:
                    crossings.append((node, child))
                else:
                    queue.append(child)
        for newer, older in crossings:
            if not _reaches(older, wanted):
                continue
            use = self._line_in(newer, parent, codes)
            if use is None:
                continue
            made = self._line_in(older, {}, codes, below=True)
            return use, made, self._shared_buffer(older, wanted)
        return None

    def _shared_buffer(self, node, wanted: set) -> Site | None:
        """When ``node`` is a write into part of a buffer (CopySlices) whose own value does not lead to ``wanted``,
        but an earlier write into the same buffer (down the base edges) wrote a value that does: the line of that
        earlier write.  The buffer ties the older graph to values that have nothing to do with it."""
        hops = 0
        while node is not None and node.name() == "torch::autograd::CopySlices" and hops < 256:
            nexts = node.next_functions
            if any(n is not None and _reaches(n, wanted) for n, _ in nexts[1:]):
                if hops == 0:
                    return None  # the value read back is the stale one itself: no other value shares the buffer
                entry = self.view_writes.get(node._sequence_nr())
                return code_site(*entry) if entry is not None else None
            node = nexts[0][0] if nexts else None
            hops += 1
        return None

    def _line_in(self, node, parent: dict, codes: tuple, below: bool = False):
        """The line of one of ``codes`` (the backward's function first) that built ``node``, from the frames of the
        nearest node that saved something: ``node`` itself, then its parents towards the roots (or, ``below``, the
        nodes under it)."""
        chains = self.node_chains
        steps = 0
        todo = [node]
        while todo and steps < 64:
            current = todo.pop(0)
            steps += 1
            chain = chains.get(current._sequence_nr())
            if chain:
                for code in codes:
                    for entry in chain:
                        if entry[0] is code:
                            return code_site(*entry)
            if below:
                todo.extend(n for n, _ in current.next_functions if n is not None)
            else:
                up = parent.get(current._sequence_nr())
                if up is not None:
                    todo.append(up)
        return None

    # -- saved tensors --

    def _pack(self, t):
        last = self.last_func
        try:
            try:
                key = t.untyped_storage()._cdata
            except Exception:  # noqa: BLE001 - no storage (sparse, nested, meta): not tracked
                key = None
            grad_fn = t.grad_fn
            # An output of the node being built: its grad_fn is the newest node.  Holding the output
            # itself would make a reference cycle (node -> handle -> tensor -> node); hold an alias.
            is_output = grad_fn is not None and grad_fn._sequence_nr() == _next_sequence_nr() - 1
            if is_output:
                with _NO_DISPATCH():  # an alias, made without a round trip through this mode
                    value = t.detach()
                node, output_nr = grad_fn.name(), t.output_nr
                role, made_by = "output", None
            else:
                value, node, output_nr = t, None, 0
                role = "weight" if isinstance(t, _Parameter) or isinstance(t._base, _Parameter) else "input"
                made_by = grad_fn.name() if grad_fn is not None else None
            self.serial += 1
            frame = sys._getframe(1)
            function = None
            saved_at = None
            if frame.f_code is _FUNCTION_APPLY:
                # ctx.save_for_backward of a custom Function: packed after its forward returned, so the
                # next aten op is the user's following line, not the op that saved it (see `unnamed`).
                cls = frame.f_locals.get("cls")
                function = getattr(cls, "__name__", None) or "Function"
                saved_at = self.function_saves.get(cls)
            site = None
            user = self.user
            while frame is not None:
                if user.is_user(frame.f_code):
                    site = (frame.f_code, frame.f_lineno, frame.f_lasti)  # made a Site only if needed
                    break
                frame = frame.f_back
            if saved_at is not None:
                site = saved_at  # the forward's `ctx.save_for_backward(...)` line
            rec = Saved(self.serial, key, value, t._version, is_output, node, output_nr, site,
                        function or (_op_name(last) if is_output and last is not None else None), role, made_by,
                        _next_sequence_nr() - 1)
            if not is_output and function is None:
                self.unnamed.append(rec)
            if (role == "weight" or self.chains) and frame is not None:
                chain = [site]
                outer = frame.f_back
                while outer is not None and len(chain) < 8:
                    if user.is_user(outer.f_code):
                        chain.append((outer.f_code, outer.f_lineno, outer.f_lasti))
                    outer = outer.f_back
                rec.chain = tuple(chain)
                del outer
                if self.chains:
                    chains = self.node_chains
                    if rec.sequence_nr not in chains:
                        chains[rec.sequence_nr] = rec.chain
                        if len(chains) > _CHAINS_KEPT:
                            del chains[next(iter(chains))]
            if key is not None and self.numpy.watched:
                rec.fingerprint = self.numpy.on_saved(key, sys._getframe(1))
            if key is not None:
                bucket = self.pending.get(key)
                if bucket is None:
                    self.pending[key] = {rec.serial: rec}
                else:
                    bucket[rec.serial] = rec
            return _Handle(rec, self)
        except Exception as exc:  # noqa: BLE001 - a tracer bug must not change the user's program
            self.internal_errors.append(f"pack: {type(exc).__name__}: {exc}")
            return _Handle(Saved(0, None, t.detach() if t.grad_fn is not None else t, t._version,
                                 False, None, 0, None, None), self)
        finally:
            self.last_func = last

    def _release(self, rec: Saved) -> None:
        bucket = self.pending.get(rec.key)
        if bucket is not None:
            bucket.pop(rec.serial, None)
            if not bucket:
                del self.pending[rec.key]
        if rec.conflicts:
            for c, _ in rec.conflicts:
                c.alive -= 1

    def _unpack(self, handle):
        rec = handle.rec
        value = rec.value
        if rec.serial == 0:
            return value
        if not rec.is_output and rec.made_by is not None and value.grad_fn is None:
            # torch's SavedVariable::unpack, without hooks, refuses an input saved with a history that was
            # `.detach_()`-ed since (hooks keep the node, so torch does not check): say it in torch's words.
            message = ("Trying to use a saved tensor that has been detached in-place, i.e. with .detach_()."
                       "This is not supported, please use out-of-place `.detach()` instead")
            detached = self.detached_in_place.get(rec.key)
            if detached is not None:
                self._detached_saved(rec, detached, message)
            else:
                self._realize(rec, "raised", message)
            self.emulated.add(message)
            raise RuntimeError(message)
        if value._version != rec.version:
            message = self._torch_message(rec)
            self._realize(rec, "raised", message)
            self.emulated.add(message)
            raise RuntimeError(message)
        if rec.conflicts:
            self._realize(rec, "silent", None)
        if rec.fingerprint is not None:
            self._compare_fingerprint(rec)
        return value

    def _compare_fingerprint(self, rec: Saved) -> None:
        """Signal (b): the saved bytes changed with no write the probe could name (the line tracer checks
        NumPy views before each line of the user's code; this catches what it could not see)."""
        if self.numpy.fingerprint(rec.key) in (rec.fingerprint, None) or any(
                c.realized == "silent" for c, _ in rec.conflicts or ()):
            return
        backward, _ = frame_sites(sys._getframe(1), self.user)
        saved_at = code_site(*rec.site) if rec.site else None
        key = (rec.site, backward[0] if backward else None, "fingerprint")
        if key in self.unexplained or not backward:
            return
        at = f" at line {saved_at.line}" if saved_at else ""
        notes = (Note(saved_at, f"saved for backward here{_by(saved_at, rec.op)}"),) if saved_at else ()
        self.unexplained[key] = ProbeFinding(
            "GG102", "silent", backward[0],
            f"backward() reads a tensor saved for backward{at} whose memory changed after it was saved, through "
            "a NumPy array that shares it (torch's version counter does not see such writes): the gradients are "
            "computed from the changed values", notes=notes, callers=tuple(backward[1:]),
            saves=(Saving(saved_at, rec.op, rec.role, rec.made_by),), backward=backward[0])

    def _torch_message(self, rec: Saved) -> str:
        """What torch's SavedVariable::unpack says when the version moved (it does not check when
        saved-tensor hooks are installed, so the probe checks and says it)."""
        value = rec.value
        shape = "[" + ", ".join(str(s) for s in value.shape) + "]"
        message = ("one of the variables needed for gradient computation has been modified by an "
                   f"inplace operation: [{_type_string(value)} {shape}]")
        if rec.is_output:
            node, nr = rec.node, rec.output_nr
        else:
            grad_fn = value.grad_fn
            node, nr = (grad_fn.name(), value.output_nr) if grad_fn is not None else (None, 0)
        if node:
            message += f", which is output {nr} of {_node_name(node)},"
        message += f" is at version {value._version}; expected version {rec.version} instead."
        if torch.is_anomaly_enabled():
            message += (" Hint: the backtrace further above shows the operation that failed to compute its "
                        "gradient. The variable in question was changed in there or anywhere later. Good luck!")
        else:
            message += (" Hint: enable anomaly detection to find the operation that failed to compute its "
                        "gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False).")
        return message

    def _detach_in_place(self, original):
        """``Tensor.detach_`` (no aten op the mode sees), watched: where a tensor with a history was detached in
        place, by storage, for the saved tensors a backward later finds detached."""
        tracer = self

        def detach_(t):
            try:
                if t.grad_fn is not None:
                    sites, _ = frame_sites(sys._getframe(1), tracer.user, limit=4)
                    if sites:
                        tracer.detached_in_place[t.untyped_storage()._cdata] = sites
            except Exception as exc:  # noqa: BLE001
                tracer.internal_errors.append(f"detach_: {type(exc).__name__}: {exc}")
            return original(t)

        detach_.__wrapped__ = original
        return detach_

    def _detached_saved(self, rec: Saved, sites: list[Site], message: str) -> None:
        backward, _ = frame_sites(sys._getframe(2), self.user)
        backward = self._from_backward_call(backward)
        key = (rec.site, sites[0], "detach_")
        if key in self.unexplained:
            return
        saved_at = code_site(*rec.site) if rec.site else None
        notes = []
        if saved_at:
            notes.append(Note(saved_at, f"saved for backward here{_by(saved_at, rec.op)}"))
        if backward:
            notes.append(Note(backward[0], f"backward() raises here: {message}"))
        said = expression_at(sites[0])
        self.unexplained[key] = ProbeFinding(
            "GG103", "raised", sites[0],
            f"`{said or 'detach_()'}` detaches in place a tensor a graph still saved for backward: it does not cut "
            "the history of what was already computed from it, and the backward that reads it raises; detach out "
            "of place (h = h.detach()) so the next steps start from a new tensor",
            torch_message=message, notes=tuple(notes), callers=tuple(sites[1:]),
            saves=(Saving(saved_at, rec.op, rec.role, rec.made_by),), backward=backward[0] if backward else None)

    def _from_backward_call(self, sites: list[Site]) -> list[Site]:
        """The user's frames of an unpack, from the user's ``backward()`` call outwards: a custom Function's
        backward (the user's code, run by the engine) is where torch read the tensor, not the backward to name."""
        called = self.hooks.backward
        if called is not None and called in sites:
            return sites[sites.index(called):]
        return sites

    def _realize(self, rec: Saved, how: str, message: str | None) -> None:
        if not rec.conflicts:  # the version moved, but not through an op the probe saw
            backward, _ = frame_sites(sys._getframe(2), self.user)
            key = (rec.site, backward[0] if backward else None)
            if key not in self.unexplained:
                site = backward[0] if backward else Site("<unknown>", 0)
                notes = ()
                saved_at = code_site(*rec.site) if rec.site else None
                if saved_at:
                    notes = (Note(saved_at, f"saved for backward here{_by(saved_at, rec.op)}"),)
                self.unexplained[key] = ProbeFinding(
                    "GG001", "raised", site,
                    "backward() raised because a saved tensor was modified in place, by an op the probe did not see "
                    "(another thread, or before the probe started)",
                    torch_message=message, notes=notes, callers=tuple(backward[1:]),
                    saves=(Saving(saved_at, rec.op, rec.role, rec.made_by),), backward=site if backward else None)
            return
        geometry = None
        chosen = []
        for c, written in rec.conflicts:
            if not (c.realized is None or (c.realized == "silent" and how == "raised")):
                continue
            if how == "silent":
                # The version did not move: only a write that touched the saved elements matters
                # (unsafe_chunk outputs share a storage but not a version counter: GRUCell writes them).
                if geometry is None:
                    geometry = geometry_of(rec.value)
                if not overlaps(written, geometry):
                    continue
            chosen.append(c)
        if not chosen:
            return
        backward, _ = frame_sites(sys._getframe(2), self.user)
        backward = self._from_backward_call(backward)
        for c in chosen:
            c.realized = how
            c.backward = backward
            c.torch_message = message
            c.realized_save = rec.saving()
            c.realized_chain = rec.chain
            self.realized_now.append(c)

    # -- every aten op --

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        if self.chains and _grad_enabled():
            self._note_node()
        spec = _WRITES.get(func)
        if spec is None:
            spec = _classify(func)
        fresh = None
        if self.unnamed:
            fresh = self.unnamed
            self.unnamed = []
            name = _op_name(func)
            for rec in fresh:
                rec.op = name
        if func in NORM_OPS:
            self.own_stats.on_norm(func, args, sys._getframe(1))
        if self.cut is not None:
            self._after_cut(func, args)
        if self.untracked.writes and torch.is_grad_enabled():
            self._read_untracked(args)
        if self.stale_grads.watched and func in RESETS:
            self.stale_grads.on_reset(args)
        if not spec:
            out = func(*args, **(kwargs or {}))
            self.last_func = func
            if not _grad_enabled():
                self._no_grad_op(args, out)
        elif spec.__class__ is str:
            out = self._special(func, spec, args, kwargs or {})
        else:
            out = self._write(func, spec, args, kwargs or {}, fresh)
        if self.grad_mode.inference:
            try:
                self.grad_mode.on_inference_op(out, sys._getframe(1))
            except Exception as exc:  # noqa: BLE001
                self.internal_errors.append(f"inference mode: {type(exc).__name__}: {exc}")
        if self.grad_mode.marks or self.grad_mode.off is not None:
            try:
                self.grad_mode.on_op(args, out, _grad_enabled())
            except Exception as exc:  # noqa: BLE001
                self.internal_errors.append(f"grad mode: {type(exc).__name__}: {exc}")
        if self.provenance.busy:
            try:
                self.provenance.on_op(func, args, kwargs, out)
            except Exception as exc:  # noqa: BLE001
                self.internal_errors.append(f"provenance: {type(exc).__name__}: {exc}")
        if self.stale_steps and _grad_enabled():
            try:
                self._mixing(args, out)
            except Exception as exc:  # noqa: BLE001
                self.internal_errors.append(f"mixing: {type(exc).__name__}: {exc}")
        if self.cuts.marked:
            try:
                self.cuts.on_op(args, kwargs, out, func)
            except Exception as exc:  # noqa: BLE001
                self.internal_errors.append(f"cuts: {type(exc).__name__}: {exc}")
        if self.grad_mode.off is not None or self.cuts.made or self.cuts.stored:
            self._stored_values(func, spec, args, kwargs, out)
        return out

    def _stored_values(self, func, spec, args, kwargs, out) -> None:
        """Values computed with grad mode off from parameters, written into a tensor, read back with grad mode on
        (``Cuts.on_made``, ``on_store``, ``on_read``)."""
        try:
            if spec and spec.__class__ is not str:
                if self.cuts.made and func in _STORES:
                    written = [kwargs.get(n) if k or i >= len(args) else args[i] for i, n, k in spec]
                    written = [t for t in written if isinstance(t, _Tensor)]
                    frame = self._user_frame(sys._getframe(2)) if written else None
                    if frame is not None:
                        self.cuts.on_store(written, (*args, *kwargs.values()) if kwargs else args, frame)
                    del frame
            elif not _grad_enabled():
                if self.grad_mode.off is not None:
                    self.cuts.on_made(args, out)
            elif self.cuts.stored or self.cuts.made:
                self.cuts.on_read(args, out, lambda: self._user_frame(sys._getframe(3)))
        except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
            self.internal_errors.append(f"stored values: {type(exc).__name__}: {exc}")

    def _mixing(self, args, out) -> None:
        """An op that combines a value whose graph holds tensors an optimizer step then updated in place (computed
        before the step) with one computed after the step from the updated parameters: the result mixes two versions
        of the same parameters (a TD error from a target computed before the critic's step and values computed after
        it).  Marked (``Cuts.on_mix``); a finding once it reaches a backward's roots (through a `.detach()` too)."""
        live = [c for c in self.stale_steps if c.alive > 0 and c.realized is None]
        self.stale_steps = live
        if not live:
            return
        nodes = []
        for a in args:
            for t in (a,) if isinstance(a, _Tensor) else a if a.__class__ in (list, tuple) else ():
                if isinstance(t, _Tensor) and t.requires_grad:
                    node = t.grad_fn
                    if node is not None:
                        nodes.append(node)
        if len(nodes) < 2:
            return
        for c in live:
            old = [n for n in nodes if n._sequence_nr() < c.step_nr]
            new = [n for n in nodes if c.step_nr <= n._sequence_nr() < _NO_SEQUENCE]
            if not old or not new:
                continue
            wanted = set().union(*c.nodes.values()) if c.nodes else set()
            if not any(_reaches(n, wanted) for n in old) or not any(_reaches_storage(n, c.written) for n in new):
                continue
            frame = self._user_frame(sys._getframe(2))
            if frame is None:
                return
            site = frame_site(frame)
            del frame
            if not accumulates(site):  # `ema = 0.9 * ema + 0.1 * out`: a value meant to span steps
                self.cuts.on_mix(out, site, c.sites[0])
            return

    def _no_grad_op(self, args, out) -> None:
        """An op that writes nothing, run with grad mode off: on a leaf that requires grad, by the user's code
        (not an optimizer's), its result may be a copy standing for that leaf (GG109, ``Cuts.is_copy``); on a tensor
        with a graph, under a switch the user's code made, its result is a cut (``Cuts.on_nograd``)."""
        try:
            off = self.grad_mode.off
            if off is not None and isinstance(out, _Tensor) and not out.requires_grad:
                for a in args:
                    try:
                        if a.__class__ is list or a.__class__ is tuple:
                            a = next((b for b in a if isinstance(b, _Tensor) and b.requires_grad), None)
                        graph = isinstance(a, _Tensor) and a.requires_grad and a.grad_fn is not None
                    except RuntimeError:  # a view made under no_grad whose base was written in grad mode
                        continue
                    if graph:
                        site = _switched_line(off, sys._getframe(2))
                        if site is not None:
                            self.cuts.on_nograd(out, site, off[0])
                        break
            for a in args:
                try:
                    leaf = isinstance(a, _Tensor) and a.requires_grad and a.is_leaf
                except RuntimeError:  # a view made under no_grad whose base was written in grad mode: torch refuses
                    continue
                if leaf and self.cuts.is_copy(a, out):
                    frame = self._user_frame_outside_optimizers(sys._getframe(2))
                    if frame is not None:
                        self.cuts.on_copy(a, out, frame)
                    del frame
        except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
            self.internal_errors.append(f"cuts: {type(exc).__name__}: {exc}")

    def _write(self, func, spec, args, kwargs, fresh):
        if self.grad_mode.inference_made and not self.grad_mode.inference:
            try:
                written = [kwargs.get(n) if k or i >= len(args) else args[i] for i, n, k in spec]
                self.grad_mode.on_write(written, sys._getframe(2))
            except Exception as exc:  # noqa: BLE001
                self.internal_errors.append(f"inference mode: {type(exc).__name__}: {exc}")
        refused = _SIGN_REFUSED.get(func)
        if refused is not None and len(args) > refused[1] and isinstance(args[refused[1]], (int, float)) \
                and args[refused[1]] < 0:
            try:
                sites, inner = frame_sites(sys._getframe(2), self.user, limit=3)
                if sites:
                    self.negative_slope = (sites, _inplace_origins(inner), refused[0])
                del inner
            except Exception as exc:  # noqa: BLE001
                self.internal_errors.append(f"{refused[0]}_: {type(exc).__name__}: {exc}")
        hits = []
        untracked = []
        into_view = False  # a write into part of a tensor (a view of it)
        recorded = []  # tensors with a history, written with grad mode on: autograd records the write
        try:
            for index, name, kwarg_only in spec:
                value = kwargs.get(name) if kwarg_only or index >= len(args) else args[index]
                if value is None:
                    continue
                for t in (value,) if isinstance(value, _Tensor) else value:
                    if not isinstance(t, _Tensor):
                        continue
                    try:
                        key = t.untyped_storage()._cdata
                    except Exception:  # noqa: BLE001 - no storage
                        continue
                    if t._base is not None:
                        into_view = True
                    if self.hooks.kept and key in self.hooks.kept:
                        self._kept_write(key, t, func)
                    if self.hooks.hook_outputs and key in self.hooks.hook_outputs:
                        sites, _ = frame_sites(sys._getframe(2), self.user, limit=3)
                        self.hooks.on_output_write(t, sites, _op_name(func))
                    bucket = self.pending.get(key)
                    recs = None
                    if bucket:
                        # The op's own saved inputs are not in conflict with its own write (BatchNorm
                        # saves running_mean and updates it in the same op).
                        recs = [r for r in bucket.values() if fresh is None or r not in fresh]
                        if recs:
                            hits.append((t, geometry_of(t), recs))
                    try:
                        if torch.is_grad_enabled() and t.grad_fn is not None:
                            recorded.append(t)
                    except RuntimeError:  # a view made under no_grad, written in grad mode: GG105 raises
                        pass
                    # Not recorded by autograd: no_grad, or an alias (`.data`, `.detach()`) that does not
                    # require grad.  A leaf that requires grad (a parameter) has no graph history to go stale.
                    if not recs:
                        try:
                            if not (t.requires_grad and (torch.is_grad_enabled() or t.is_leaf)):
                                untracked.append((t.untyped_storage(), self._carries_history(args, spec), t))
                        except RuntimeError:  # a view made under no_grad, written in grad mode: GG105 raises
                            pass
        except Exception as exc:  # noqa: BLE001
            self.internal_errors.append(f"dispatch: {type(exc).__name__}: {exc}")
            hits = []
        recorded_views = 0
        if into_view and self._carries_history(args, spec):
            recorded_views = _next_sequence_nr()  # the CopySlices autograd makes once the kernel returns
        out = func(*args, **kwargs)
        self.last_func = func
        if hits:
            try:
                self._conflict(func, hits)
            except Exception as exc:  # noqa: BLE001
                self.internal_errors.append(f"conflict: {type(exc).__name__}: {exc}")
        if recorded:
            try:
                frame = self._user_frame(sys._getframe(2))
                if frame is not None:
                    for t in recorded:
                        self.asked.on_write(t, frame, _op_name(func))
                    del frame
            except Exception as exc:  # noqa: BLE001
                self.internal_errors.append(f"asked: {type(exc).__name__}: {exc}")
        if recorded_views:
            try:
                frame = self._user_frame(sys._getframe(2))
                if frame is not None:
                    self.view_writes[recorded_views] = (frame.f_code, frame.f_lineno, frame.f_lasti)
                    if len(self.view_writes) > _CHAINS_KEPT:
                        del self.view_writes[next(iter(self.view_writes))]
                del frame
            except Exception as exc:  # noqa: BLE001
                self.internal_errors.append(f"view write: {type(exc).__name__}: {exc}")
        if untracked and _op_name(func).endswith("_"):  # an in-place op (not BatchNorm's running stats)
            try:
                frame = self._user_frame_outside_optimizers(sys._getframe(2))
                if frame is not None and not _in_function_forward(frame):
                    for storage, tracked, t in untracked:
                        self.untracked.on_write(storage, frame, _op_name(func), torch.is_grad_enabled(), tracked)
                        if tracked and self.cuts.marked:
                            self._partial_write_of_cut(t, frame)
                    del frame
            except Exception as exc:  # noqa: BLE001
                self.internal_errors.append(f"untracked: {type(exc).__name__}: {exc}")
        return out

    @staticmethod
    def _carries_history(args, spec) -> bool:
        """Whether an in-place op run with grad mode on writes a value that requires grad (another operand than the
        written ones does): autograd then records the write on the written tensor (it gets the write's node)."""
        if not torch.is_grad_enabled():
            return False
        written = {index for index, _, _ in spec}
        return any(isinstance(a, _Tensor) and a.requires_grad for i, a in enumerate(args) if i not in written)

    def _partial_write_of_cut(self, t, frame) -> None:
        """``t``, a view of part of a tensor computed from a `.detach()`/`.data` cut (``h.data.clone()``), got values
        with a history: only that part is differentiable, the rest keeps the values whose history the cut dropped."""
        base = t._base
        if base is None or t.numel() >= base.numel():
            return
        cut = self.cuts.cut_of(t)
        if cut is not None:
            self.cuts.on_partial_write(cut, frame_site(frame))

    def _kept_write(self, key, t, func) -> None:
        """An in-place write to an output a user forward hook kept (``GradientHooks.kept``)."""
        sites, inner = frame_sites(sys._getframe(3), self.user, limit=1)
        origins = _inplace_origins(inner)
        del inner
        self.hooks.on_kept_write(key, t, sites, _op_name(func), origins)

    def _user_frame_outside_optimizers(self, frame):
        """The user's frame, or None when the write is an optimizer's (its state and parameters are leaves)."""
        user = self.user
        while frame is not None and not user.is_user(frame.f_code):
            if "/torch/optim/" in frame.f_code.co_filename.replace(os.sep, "/"):
                return None
            frame = frame.f_back
        return frame

    def _read_untracked(self, args) -> None:
        def frame_of():
            return self._user_frame(sys._getframe(3))

        try:
            self.untracked.on_read(args, frame_of)
        except Exception as exc:  # noqa: BLE001
            self.internal_errors.append(f"untracked: {type(exc).__name__}: {exc}")

    def _numpy_write(self, storage, site: Site) -> None:
        """A NumPy array wrote ``storage`` at the user's line ``site`` (seen by its checksum)."""
        self.untracked.on_numpy_write(storage, site)
        bucket = self.pending.get(storage._cdata)
        if not bucket:
            return
        recs = list(bucket.values())
        key = ("numpy", site.path, site.line, site.column)
        conflict = self.conflicts.get(key)
        if conflict is None:
            conflict = self.conflicts[key] = Conflict(
                op="numpy", sites=[site], code_hint="GG102", origins=[], first=recs[0], first_overlaps=True,
                through="a write through a NumPy array that shares its memory")
        conflict.count += 1
        self._link(conflict, [(None, None, recs)])

    def backward_write(self, func, args, kwargs, frame) -> None:
        """An op run by the user's code during a backward (a custom Function's backward, a hook), where the
        tracer's mode is off: a write to a tensor a live graph saved is a conflict like any other (``frame``:
        where the op was called).  Called by ``GradientHooks``' watch."""
        spec = _WRITES.get(func)
        if spec is None:
            spec = _classify(func)
        if not spec or spec.__class__ is str:
            return
        hits = []
        for index, name, kwarg_only in spec:
            value = kwargs.get(name) if kwarg_only or index >= len(args) else args[index]
            for t in (value,) if isinstance(value, _Tensor) else (value or ()):
                if not isinstance(t, _Tensor):
                    continue
                try:
                    bucket = self.pending.get(t.untyped_storage()._cdata)
                except Exception:  # noqa: BLE001 - no storage
                    continue
                if bucket:
                    hits.append((t, geometry_of(t), list(bucket.values())))
        if hits:
            self._conflict(func, hits, frame)

    def _conflict(self, func, hits, frame=None) -> None:
        frame = frame if frame is not None else sys._getframe(3)
        sites, inner = frame_sites(frame, self.user)
        if not sites:
            return  # torch writing its own saved tensors, away from any user code
        op = _op_name(func)
        key = (op, sites[0].path, sites[0].line, sites[0].column)
        conflict = self.conflicts.get(key)
        if conflict is None:
            written, geometry, recs = hits[0]
            code, origins = self._code_hint(op, written, sites[0], inner)
            conflict = self.conflicts[key] = Conflict(
                op=op, sites=sites, code_hint=code, origins=origins, first=recs[0],
                first_overlaps=overlaps(geometry, geometry_of(recs[0].value)))
            try:
                conflict.input_alias = _function_input_alias(frame, written, sites[0], self.user)
            except Exception as exc:  # noqa: BLE001
                self.internal_errors.append(f"conflict: {type(exc).__name__}: {exc}")
        del inner, frame
        conflict.count += 1
        if conflict.code_hint == "GG101":
            conflict.step_nr = _next_sequence_nr()
            self.chains = True
            for t, _, _ in hits:
                try:
                    conflict.written.add(t.untyped_storage()._cdata)
                except Exception:  # noqa: BLE001 - no storage
                    pass
            if conflict not in self.stale_steps:
                self.stale_steps.append(conflict)
        self._link(conflict, hits)

    @staticmethod
    def _link(conflict: Conflict, hits) -> None:
        """Attach ``conflict`` to the saved tensors it hit (a geometry of None: the whole storage)."""
        for _, geometry, recs in hits:
            for rec in recs:
                written = geometry if geometry is not None else geometry_of(rec.value)
                if rec.conflicts is None:
                    rec.conflicts = [(conflict, written)]
                elif any(c is conflict for c, _ in rec.conflicts):
                    continue
                else:
                    rec.conflicts.append((conflict, written))
                conflict.alive += 1
                saving = rec.saving()
                if len(conflict.saves) < 3 and saving not in conflict.saves:
                    conflict.saves.append(saving)
                if saving in conflict.nodes:
                    conflict.nodes[saving].add(rec.sequence_nr)
                elif len(conflict.nodes) < _SAVES_KEPT:
                    conflict.nodes[saving] = {rec.sequence_nr}

    @staticmethod
    def _code_hint(op: str, written, site: Site, inner: list) -> tuple[str, list[Site]]:
        """Which rule the mutating call looks like, and the lines of the inplace=True modules involved."""
        files = [f.f_code.co_filename.replace(os.sep, "/") for f in inner]
        if any("/torch/optim/" in f or f.endswith("/torch/nn/utils/clip_grad.py") for f in files):
            return "GG101", []
        origins = _inplace_origins(inner)
        if origins or any(f.endswith("/torch/nn/functional.py") for f in files):
            return "GG005", origins
        if op in _INPLACE_ACTIVATIONS:
            # The function form (`F.relu_(x)`, or the function held in a variable: `act = partial(F.relu_)`)
            # is GG005; the method form `x.relu_()` is a plain in-place write (GG001), as the static rules say.
            segment = _source_segment(site)
            method_form = re.search(rf"\.\s*{re.escape(op)}\s*\(", segment) and not _FUNCTIONAL_CALL.search(segment)
            if not method_form:
                return "GG005", []
        if written.is_leaf and written.requires_grad and not torch.is_grad_enabled():
            return "GG101", []  # a parameter updated by hand under no_grad
        return "GG001", []

    # -- graph breaks --

    def _special(self, func, kind, args, kwargs):
        out = func(*args, **kwargs)
        self.last_func = func
        try:
            if kind is _SCALAR:
                t = args[0] if args else None
                if isinstance(t, _Tensor) and t.requires_grad and torch.is_grad_enabled():
                    frame = self._user_frame(sys._getframe(1))
                    if frame is not None:
                        self.cut = Cut(frame_site(frame))
                        self.provenance.read_scalar(out, frame, t)
                        self.scalar_reads.append((id(frame.f_code), self.cut.site))
                        del self.scalar_reads[:-20]
            elif kind is _VIEWS:
                if args and isinstance(args[0], _Tensor) and args[0].requires_grad and torch.is_grad_enabled() \
                        and isinstance(out, (tuple, list)) and len(out) > 1:
                    frame = self._user_frame(sys._getframe(1))
                    if frame is not None:
                        self._remember_views(out, frame_site(frame))
                    del frame
            elif kind is _FRESH or (kind is _DETACH and args[0].requires_grad and torch.is_grad_enabled()):
                frame = self._user_frame(sys._getframe(1))
                if frame is not None:
                    self.rebuilds.append((id(frame.f_code), frame_site(frame)))
                    del self.rebuilds[:-20]
                    if kind is _FRESH and self.provenance.arrays and isinstance(args[0], _Tensor):
                        self.provenance.on_fresh(args[0], out, frame)
                    if kind is _DETACH:
                        self.provenance.read_detached(out, frame)
                        if args[0].grad_fn is not None:
                            self.numpy.graph_view(out)
                        self.cuts.on_detach(out, args[0], sys._getframe(2))
        except Exception as exc:  # noqa: BLE001
            self.internal_errors.append(f"special: {type(exc).__name__}: {exc}")
        return out

    def _user_frame(self, frame):
        return user_frame(frame, self.user)

    def _remember_views(self, views, site: Site) -> None:
        table = self.multi_views
        for t in views:
            if isinstance(t, _Tensor):
                table[id(t)] = (weakref.ref(t, forgetter(table, id(t))), site)
        while len(table) > _MULTI_VIEWS_KEPT:
            del table[next(iter(table))]

    def multi_view_site(self, t) -> Site | None:
        """Where the user's code made ``t`` as one of several views of a tensor that requires grad, or None."""
        entry = self.multi_views.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    def _after_cut(self, func, args) -> None:
        """The op right after a value was read out of the graph: on the same line, does the value go
        back into a tensor (a factory) or into math with tensors that require grad?  That is a graph
        break: the value's gradient is dropped.  Reading it for logging uses no tensor op on its line."""
        cut = self.cut
        try:
            frame = self._user_frame(sys._getframe(2))
            # Same file and line, not same frame: `sum(p.sum().item() for p in ...)` reads in a genexpr.
            if frame is None or frame.f_lineno != cut.site.line or frame.f_code.co_filename != cut.site.path:
                self.cut = None
                return
            kind = _WRITES.get(func)
            # Into a new tensor, or as a float operand of math on tensors that require grad (ints are
            # dims and sizes: `logits.softmax(-1)` on a logging line reuses nothing).
            reused = kind is _FRESH or (any(a.__class__ is float for a in args)
                                        and any(isinstance(a, _Tensor) and a.requires_grad for a in args))
            if reused and not cut.reused:
                cut.reused = True
                self.rebuilds.append((id(frame.f_code), cut.site))
                key = (cut.site.path, cut.site.line)
                if key not in self.graph_breaks:
                    self.graph_breaks[key] = ProbeFinding(
                        "GG103", "graph-break", cut.site,
                        "a value read out of a tensor that requires grad (`.item()`, `float()`) goes back into "
                        "tensor math on the same line: its gradient is silently dropped (a graph break)",
                        severity="warning", op=_op_name(func))
        except Exception as exc:  # noqa: BLE001
            self.internal_errors.append(f"cut: {type(exc).__name__}: {exc}")
            self.cut = None

    # -- results --

    def findings(self) -> list[ProbeFinding]:
        """Every conflict that mattered, plus the unexplained version errors.  Call after the run."""
        self.asked.waiting.clear()  # the graph nodes they hold must not keep a graph "alive" below
        gc.collect()  # graphs kept alive only by reference cycles are dropped, like a long run would
        found = list(self.unexplained.values()) + list(self.graph_breaks.values())
        placed: dict[tuple, int] = {}  # several writes placed at one line (an alias, a module): one finding there
        for c in self.conflicts.values():
            if c.co_steps and c.stale is None and not c.folded:
                _forward_before_steps(c)  # folds the other steps into this one's finding, before they are reported
        for c in self.conflicts.values():
            if c.folded:
                continue
            finding = self._finding(c)
            if finding is None:
                continue
            key = (finding.site.path, finding.site.line, finding.code)
            if finding.site != c.sites[0] and key in placed:
                first = found[placed[key]]
                found[placed[key]] = dataclasses.replace(
                    first, origins=first.origins + tuple(o for o in finding.origins if o not in first.origins),
                    count=first.count + finding.count)
                continue
            placed.setdefault(key, len(found))
            found.append(finding)
        found += (self.hooks.findings() + self.asked.findings() + self.flags.findings() + self.guarded.findings()
                  + self.stale_grads.findings()
                  + self.returned.findings() + self.copied.findings() + self.own_stats.findings()
                  + self.synced.findings())
        taken = {(f.site.path, f.site.line) for f in found}
        found += [f for f in self.cuts.findings() if (f.site.path, f.site.line) not in taken]
        taken = {(f.site.path, f.site.line) for f in found}
        return found + self.untracked.findings(taken)

    def _finding(self, c: Conflict) -> ProbeFinding | None:
        if c.realized is None:
            if c.alive <= 0:
                return None  # the graph was dropped without a backward: torch never minds
            silent = c.first.value._version == c.first.version
            if silent and not c.first_overlaps:
                return None
        else:
            silent = c.realized == "silent"
        code = "GG102" if silent else c.code_hint
        save = c.realized_save or (c.saves[0] if c.saves else (None, None, "input", None))
        save_site = code_site(*save[0]) if save[0] else None
        saved_by = _by(save_site, save[1])
        at = f" at line {save_site.line}" if save_site else ""
        writer = _written_by(c.sites[0], c.op)
        notes = []
        saves = []
        for s_site, s_op, s_role, s_made_by in ([save] + [s for s in c.saves if s != save])[:3]:
            site = code_site(*s_site) if s_site else None
            saves.append(Saving(site, s_op, s_role, s_made_by))
            if site:
                notes.append(Note(site, f"saved for backward here{_by(site, s_op)}"))
        for origin in c.origins:
            notes.append(Note(origin, "the module that writes in place (inplace=True) is made here"))
        if c.realized == "raised":
            kind, severity = "raised", "error"
            first_line = (c.torch_message or "").split(". Hint:")[0]
            where = f" at line {c.backward[0].line}" if c.backward else ""
            message = (f"{writer} modifies in place a tensor saved for backward{saved_by}{at}; backward(){where} "
                       "then raises \"modified by an inplace operation\"")
            if c.backward:
                notes.append(Note(c.backward[0], f"backward() raises here: {first_line}"))
        elif c.realized == "silent":
            kind, severity = "silent", "error"
            where = f" at line {c.backward[0].line}" if c.backward else ""
            message = (f"{writer} changes a tensor saved for backward{saved_by}{at} without bumping its version "
                       f"({c.through}): backward(){where} silently uses the new values, so the gradients are wrong")
            if c.backward:
                notes.append(Note(c.backward[0], "backward() reads the changed tensor here"))
        else:
            kind, severity = "pending", "warning"
            if silent:
                message = (f"{writer} changes a tensor saved for backward{saved_by}{at} without bumping its version; "
                           "no backward used it before the run ended (one would silently compute wrong gradients)")
            else:
                message = (f"{writer} modifies in place a tensor saved for backward{saved_by}{at}; no backward used it "
                           "before the run ended (one would raise \"modified by an inplace operation\")")
        if c.count > 1:
            message += f" [seen {c.count} times]"
        alias = None
        if c.input_alias is None and code in ("GG001", "GG102") and c.code_hint == "GG001":
            alias = alias_before(c.sites[0])
        if alias is not None:
            # `out = x; out[:, :h] = v`: the write goes through another name of a tensor a graph saved; the line
            # to change is the one that made the name (take a copy there), the writes are how.
            said = expression_at(alias)
            message = (f"`{said or 'this line'}` gives a second name to a tensor a graph saved, not a copy, so "
                       f"{writer} on line {c.sites[0].line} changes it: take a copy here. " + message)
            notes.insert(0, Note(c.sites[0], ALIAS_NOTE))
            return ProbeFinding(code, kind, alias, message, severity=severity, torch_message=c.torch_message,
                                notes=tuple(notes), callers=tuple(c.sites[1:]),
                                origins=(c.sites[0],) + tuple(c.origins), op=c.op, count=c.count,
                                saves=tuple(saves), backward=c.backward[0] if c.backward else None)
        if c.input_alias is not None:
            rebound, function = c.input_alias
            said = expression_at(rebound)
            message = (f"`{said or 'this line'}` gives back the input of `{function}` itself (a conversion that has "
                       f"nothing to do returns its argument, not a copy), so {writer} on line {c.sites[0].line} "
                       f"writes the caller's tensor, and `{function}` never marks it dirty: clone it here. " + message)
            notes.insert(0, Note(c.sites[0], INPUT_NOTE))
            return ProbeFinding(code, kind, rebound, message, severity=severity, torch_message=c.torch_message,
                                notes=tuple(notes), callers=tuple(c.sites[1:]),
                                origins=(c.sites[0],) + tuple(c.origins), op=c.op, count=c.count,
                                saves=tuple(saves), backward=c.backward[0] if c.backward else None)
        if c.op == "embedding_renorm_" and save_site is not None and save_site not in c.sites:
            # `nn.Embedding(max_norm=...)` renormalises the rows it looks up in its weight, in place, on every call:
            # a side effect the call cannot avoid.  torch's documentation of max_norm says what to change: a
            # differentiable use of the weight before the call must use a clone of it, here at the save.
            said = expression_at(save_site)
            message = (f"`{said or 'this line'}` uses an embedding's weight in a graph that saves it, and the embedding, "
                       f"made with max_norm, renormalises that weight in place when it is called on line "
                       f"{c.sites[0].line}: use a clone of the weight here (`weight.clone()`, as torch's documentation "
                       "of max_norm says). " + message)
            notes = [Note(c.sites[0], RENORM_NOTE)] + [n for n in notes if n.site != save_site]
            return ProbeFinding(code, kind, save_site, message, severity=severity, torch_message=c.torch_message,
                                notes=tuple(notes), callers=(), origins=tuple(c.sites) + tuple(c.origins), op=c.op,
                                count=c.count, saves=tuple(saves), backward=c.backward[0] if c.backward else None)
        if c.code_hint == "GG005" and c.origins and c.origins[0] not in c.sites:
            # The write happens inside torch's module, called from the user's line: the line to change is where
            # the module was made with inplace=True (as the static rule says), the call is how it got there.
            notes.insert(0, Note(c.sites[0], MODULE_NOTE))
            notes = [n for n in notes if n.site != c.origins[0]]
            made = expression_at(c.origins[0])
            message = (f"`{made}` is a module that writes in place (inplace=True); run by {writer} on line "
                       f"{c.sites[0].line}, it " + message[len(writer) + 1:] if made and message.startswith(writer)
                       else message)
            return ProbeFinding(code, kind, c.origins[0], message, severity=severity, torch_message=c.torch_message,
                                notes=tuple(notes), callers=tuple(c.sites), origins=tuple(c.origins[1:]),
                                op=c.op, count=c.count, saves=tuple(saves),
                                backward=c.backward[0] if c.backward else None)
        order = _order_to_change(c) if code == "GG101" and c.realized is not None else None
        forward = _forward_before_steps(c) if order is None and code == "GG101" and c.stale is None else None
        if forward is not None:
            # Several optimizer steps (different lines) change weights one graph saved, all between its forward and
            # its backward: the one line to change is the forward (compute it after the steps), not each step.
            place, steps = forward
            said = expression_at(place)
            lines = ", ".join(str(site.line) for site in steps)
            where = f" on line {c.backward[0].line}" if c.backward else ""
            message = (f"`{said or 'this line'}` builds a graph whose saved weights {len(steps)} optimizer steps "
                       f"(lines {lines}) then update in place, before its backward{where} runs: compute it after "
                       "the steps. " + message)
            notes.insert(0, Note(c.sites[0], STEP_NOTE))
            for other in reversed([site for site in steps if site != c.sites[0]]):
                notes.insert(1, Note(other, "another optimizer step that updates weights this graph saved"))
            return ProbeFinding(code, kind, place, message, severity=severity, torch_message=c.torch_message,
                                notes=tuple(notes), callers=tuple(c.sites[1:]),
                                origins=tuple(steps) + tuple(c.origins), op=c.op, count=c.count,
                                saves=tuple(saves), backward=c.backward[0] if c.backward else None)
        if order is None and code == "GG101" and c.stale is not None and c.stale[0] not in c.sites:
            # The backward's graph was built after the step, around a value computed before it: the line to change
            # is where that stale value joined the new graph (compute it again after the step, or detach it).
            use, made, shared = c.stale
            if shared is not None:
                # The new graph reads one part of a buffer; an earlier write put into another part of it a value whose
                # graph saved what the step changed: backward runs through every write into the buffer.
                said = expression_at(Site(shared.path, shared.line))
                message = (f"`{said or 'this line'}` writes, in place, into part of a buffer a value whose graph saved "
                           f"tensors that {writer} on line {c.sites[0].line} then updates in place{saved_by}{at}; the "
                           f"graph built after the step reads another part of that buffer (line {use.line}), and its "
                           "backward runs through every write into the buffer, into that older graph. Keep such values "
                           "in separate tensors (a list whose items are read one by one: stacking them links the graphs "
                           "again), or write detached values. " + message)
                notes.insert(0, Note(c.sites[0], STEP_NOTE))
                notes.insert(1, Note(use, BUFFER_READ_NOTE))
                return ProbeFinding(code, kind, shared, message, severity=severity, torch_message=c.torch_message,
                                    notes=tuple(notes), callers=(), origins=tuple(c.sites) + tuple(c.origins),
                                    op=c.op, count=c.count, saves=tuple(saves),
                                    backward=c.backward[0] if c.backward else None)
            upstream = _saved_before_made(c, use, made)
            if upstream is not None:
                # The value the new graph took was computed (line `built`) from values whose graph had already saved the
                # parameters (line `forward`, earlier in the same function, before the step): computing that value
                # again after the step would still run into the old graph.  The whole computation is meant to be
                # backpropagated once more before the parameters change: the step is the line to move.
                forward, built = upstream
                said = expression_at(Site(built.path, built.line))
                used = expression_at(use)
                where = f" on line {c.backward[0].line}" if c.backward else ""
                message = (f"{writer} updates in place the parameters saved for backward{saved_by}{at} while a graph computed from them "
                           f"(line {forward.line}, then `{said or 'the value'}` on line {built.line}) still has a "
                           f"backward to run: `{used or 'the value'}` on line {use.line} builds on it after the step, "
                           f"and the backward(){where} runs into it. Step after that backward (or compute everything "
                           f"from line {forward.line} on again after the step). " + message)
                notes.insert(0, Note(use, STALE_USE_NOTE))
                notes.insert(1, Note(Site(built.path, built.line, built.column), "the value used after the step is computed here, before it"))
                return ProbeFinding(code, kind, c.sites[0], message, severity=severity, torch_message=c.torch_message,
                                    notes=tuple(notes), callers=tuple(c.sites[1:]), origins=tuple(c.origins),
                                    op=c.op, count=c.count, saves=tuple(saves),
                                    backward=c.backward[0] if c.backward else None)
            kept = _kept_on_object(c, use)
            if kept is not None:
                # The older graph reached the new one through a value stored on an object (a cache, a module-held
                # state) before the step: the store is the line to change (store it detached, or compute it anew).
                said = expression_at(Site(kept.path, kept.line))
                message = (f"`{said or 'this line'}` stores on an object a value whose graph saved tensors that "
                           f"{writer} on line {c.sites[0].line} then updates in place{saved_by}{at}; the graph built "
                           f"after the step (line {use.line}) uses the stored value, and its backward runs into that "
                           "older graph. Store it detached, or compute it again after each step. "
                           + message)
                notes.insert(0, Note(c.sites[0], STEP_NOTE))
                notes.insert(1, Note(use, "the graph built after the step takes the stored value here"))
                return ProbeFinding(code, kind, kept, message, severity=severity, torch_message=c.torch_message,
                                    notes=tuple(notes), callers=(), origins=tuple(c.sites) + tuple(c.origins),
                                    op=c.op, count=c.count, saves=tuple(saves),
                                    backward=c.backward[0] if c.backward else None)
            said = expression_at(use)
            made_at = f" (computed on line {made.line})" if made is not None and made != use else ""
            message = (f"`{said or 'this line'}` uses a value computed before {writer} on line {c.sites[0].line}"
                       f"{made_at}, whose graph saved tensors the step then updated in place{saved_by}{at}: the "
                       "backward of the graph built here runs into that older graph. Compute the value again after the "
                       "step (or detach it). " + message)
            notes.insert(0, Note(c.sites[0], STEP_NOTE))
            if made is not None and made != use:
                notes.insert(1, Note(made, "the value used after the step is computed here, before it"))
            return ProbeFinding(code, kind, use, message, severity=severity, torch_message=c.torch_message,
                                notes=tuple(notes), callers=(), origins=tuple(c.sites) + tuple(c.origins),
                                op=c.op, count=c.count, saves=tuple(saves),
                                backward=c.backward[0] if c.backward else None)
        if order is not None:
            # The step or the backward runs inside a helper: the order to change is in the function that calls
            # both, at the call that runs the backward through the graph the step made stale.
            place, calls_step, calls_backward, behind = order
            said = expression_at(place)
            step_said = expression_at(calls_step) if calls_step != c.sites[0] else None
            step = ((f" (reached from `{step_said}` on line {calls_step.line})" if step_said else
                     f" on line {c.sites[0].line}"))
            if c.backward and place in c.backward:
                message = (f"`{said or 'this call'}` runs a backward() through a graph built before {writer}{step} "
                           f"updated the parameters it saved{saved_by}{at}: " + message)
            else:
                message = (f"`{said or 'this call'}` builds a graph whose saved weights {writer}{step} then updates "
                           f"in place, before its backward runs: compute it after the step. " + message)
            notes.insert(0, Note(c.sites[0], STEP_NOTE))
            if step_said:
                notes.insert(1, Note(calls_step, STEP_CALL_NOTE))
            if calls_backward != place and calls_backward not in (c.backward or [])[:1]:
                notes.insert(1 + bool(step_said), Note(calls_backward, BACKWARD_CALL_NOTE))
            return ProbeFinding(code, kind, place, message, severity=severity,
                                torch_message=c.torch_message, notes=tuple(notes), callers=tuple(behind),
                                origins=tuple(c.sites) + tuple(c.origins), op=c.op, count=c.count,
                                saves=tuple(saves), backward=c.backward[0] if c.backward else None)
        if code in ("GG001", "GG102") and c.code_hint == "GG001" and len(c.sites) > 1 and setter_write(c.sites[0]):
            # The write sits in an accessor (`assign`): a method that stores what its caller hands it, in place, into
            # its object's tensor.  Which tensor a graph saved, and when the value is stored, is the caller's doing:
            # the line to change is the call (rebind instead of writing in place, or hand the graph a clone).
            call = c.sites[1]
            said = expression_at(call)
            message = (f"`{said or 'this call'}` has a method store a value in place into its object's tensor (line "
                       f"{c.sites[0].line}), a tensor a graph saved for backward{saved_by}{at}: " + message)
            notes.insert(0, Note(c.sites[0], SETTER_NOTE))
            return ProbeFinding(code, kind, call, message, severity=severity, torch_message=c.torch_message,
                                notes=tuple(notes), callers=tuple(c.sites[2:]),
                                origins=(c.sites[0],) + tuple(c.origins), op=c.op, count=c.count,
                                saves=tuple(saves), backward=c.backward[0] if c.backward else None)
        return ProbeFinding(code, kind, c.sites[0], message, severity=severity, torch_message=c.torch_message,
                            notes=tuple(notes), callers=tuple(c.sites[1:]), origins=tuple(c.origins), op=c.op,
                            count=c.count, saves=tuple(saves), backward=c.backward[0] if c.backward else None)


def _function_input_alias(frame, written, site: Site, user: UserCode) -> tuple | None:
    """When ``frame`` (the user's line that wrote ``written``) runs a custom Function's forward and ``written`` is
    that Function's input itself (same storage), reached through a name the forward rebound from a call
    (``x = x.float()``, ``x = x.contiguous()``): (the rebinding's site, the Function's name).  None otherwise,
    and for a write to the forward's parameter as it came in (the write's own line is the one to change)."""
    user_code = user_frame(frame, user)
    apply = user_code
    depth = 0
    while apply is not None and apply.f_code is not _FUNCTION_APPLY and depth < 8:
        apply, depth = apply.f_back, depth + 1
    if apply is None or apply.f_code is not _FUNCTION_APPLY or user_code.f_back is not apply:
        return None  # not written by the forward itself (a helper it calls: its own line is the place)
    inputs = apply.f_locals.get("args") or ()
    storage = written.untyped_storage()._cdata
    if not any(isinstance(a, _Tensor) and a.untyped_storage()._cdata == storage for a in inputs):
        return None
    rebound = rebinding_before(site)
    if rebound is None:
        return None
    name = getattr(apply.f_locals.get("cls"), "__name__", None) or "Function"
    return rebound, name


def _saved_before_made(c: Conflict, use: Site, made: Site | None) -> tuple[Site, Site] | None:
    """For a step ``c`` whose stale graph a later graph took at ``use``: (the line of the step's function that ran the
    forward which saved what the step changed, the line after it that computed the value ``use`` took), when both
    come before the step (the value was built on an output that already held the old parameters, so computing it
    again after the step would not help).  The value's line is ``made`` when the run knows it, else the latest
    assignment before ``use`` of a name ``use`` reads.  None when the value is the forward's own output, or unknown."""
    if not c.realized_chain:
        return None
    step = c.sites[0]
    function = enclosing_function(step)
    if function is None or use.path != step.path or enclosing_function(use) != function:
        return None
    forward = None
    for entry in c.realized_chain:
        site = code_site(*entry)
        if site.path == step.path and enclosing_function(site) == function:
            forward = site
            break
    if forward is None or forward.line >= step.line:
        return None
    if made is not None and (made.path, enclosing_function(made)) == (step.path, function):
        values = [made]
    else:
        values = assignments_read_at(use)
    if not values or any(v.line <= forward.line <= (v.end_line or v.line) for v in values):
        return None  # the new graph took the forward's own output: computing that line again after the step is the fix
    after = [v for v in values if forward.line < v.line < step.line]
    return (forward, min(after, key=lambda v: v.line)) if after else None


def _kept_on_object(c: Conflict, use: Site) -> Site | None:
    """For a step ``c`` whose stale graph a later graph used at ``use``: the innermost line of the saving chain (the
    frames that ran the forward the step made stale) that stores its value on an object, or None."""
    for entry in c.realized_chain:
        site = code_site(*entry)
        if (site.path, site.line) == (use.path, use.line):
            continue
        stored = attribute_store(site)
        if stored is not None and (stored.path, stored.line) != (use.path, use.line):
            return stored
    return None


def _switched_line(off: tuple, frame) -> Site | None:
    """The current line of the user's frame that switched grad mode off (``GradMode.off``: its id), found from
    ``frame`` outwards; None when that frame is not on the stack (a switch left off by a function that returned)."""
    caller = off[2]
    depth = 0
    while frame is not None and depth < 64:
        if id(frame) == caller:
            return frame_site(frame)
        frame, depth = frame.f_back, depth + 1
    return None


def _forward_before_steps(c: Conflict) -> tuple[Site, list[Site]] | None:
    """For an optimizer step ``c`` (its own line in the function that runs the backward) whose graph other steps
    (``c.co_steps``, other lines of that function) also changed: the line of that function that ran the forward
    which saved the weights, when it comes before every one of the steps, and the steps' lines, in order.  The
    other steps are folded into this finding.  None when there is one step, or the forward comes between them."""
    if not c.co_steps or not c.backward or not c.realized_chain or c.folded:
        return None
    step = c.sites[0]
    backward = c.backward[0]
    function = enclosing_function(step)
    if function is None or backward.path != step.path or enclosing_function(backward) != function:
        return None
    steps = [step] + [o.sites[0] for o in c.co_steps if o.sites[0].path == step.path
                      and enclosing_function(o.sites[0]) == function and o.sites[0].line < backward.line]
    steps = sorted({site.line: site for site in reversed(steps)}.values(), key=lambda site: site.line)
    if len(steps) < 2:
        return None
    forward = next((code_site(*entry) for entry in c.realized_chain
                    if entry[0].co_filename == step.path and enclosing_function(code_site(*entry)) == function), None)
    if forward is None or forward.line >= steps[0].line:
        return None
    for o in c.co_steps:
        if o.sites[0].line in {site.line for site in steps} and o.sites[0].path == step.path:
            o.folded = True
    return forward, steps


def _order_to_change(c: Conflict) -> tuple[Site, Site, Site, list[Site]] | None:
    """For an optimizer step (``c.sites``, innermost first) and the backward that then used what it changed
    (``c.backward``): when either runs inside a helper, the function that calls both, as (its line to change: the
    forward it ran before the step, else the line that leads to the backward; its line that leads to the step; its
    line that leads to the backward; the calls outside it).  None when both are in one function
    (the step's own line is the one to move) or the chains share no function."""
    steps, backwards = list(reversed(c.sites)), list(reversed(c.backward))
    if not steps or not backwards:
        return None
    i = 0
    while i < len(steps) and i < len(backwards) and steps[i] == backwards[i]:
        i += 1  # the same call, outside the function that holds both
    if i >= len(steps) or i >= len(backwards):
        return None
    if i == len(steps) - 1 and i == len(backwards) - 1:
        return None  # step and backward in one function: nothing in between to name
    if steps[i].path != backwards[i].path or enclosing_function(steps[i]) != enclosing_function(backwards[i]):
        return None
    if steps[i].line == backwards[i].line:
        return None  # one call runs both (a helper that steps, then runs the backward): the helper is the place
    saves = list(reversed([code_site(*f) for f in c.realized_chain]))
    if (len(saves) > i and saves[:i] == backwards[:i] and saves[i].path == steps[i].path
            and saves[i].line < steps[i].line and enclosing_function(saves[i]) == enclosing_function(steps[i])):
        # The forward that saved the weights ran in that same function, before the step: computing it after the
        # step is the change (the backward's call then uses fresh weights).
        return saves[i], steps[i], backwards[i], list(reversed(backwards[:i]))
    return backwards[i], steps[i], backwards[i], list(reversed(backwards[:i]))


_NO_SEQUENCE = 2 ** 63  # AccumulateGrad and graph roots made by hand carry no real sequence number (UINT64_MAX)


def _user_codes(frame, user: UserCode) -> tuple:
    """The code objects of the user's frames from ``frame`` outwards (at most 8)."""
    codes = []
    while frame is not None and len(codes) < 8:
        if user.is_user(frame.f_code):
            codes.append(frame.f_code)
        frame = frame.f_back
    return tuple(codes)


def _reaches(node, wanted: set) -> bool:
    """Whether the graph under ``node`` holds a node numbered in ``wanted``."""
    stack, seen = [node], set()
    while stack and len(seen) < _STALE_WALK:
        current = stack.pop()
        nr = current._sequence_nr()
        if nr in wanted:
            return True
        if nr in seen:
            continue
        seen.add(nr)
        stack.extend(n for n, _ in current.next_functions if n is not None)
    return False


def _reaches_storage(node, storages: set) -> bool:
    """Whether the graph under ``node`` reaches a leaf (a parameter) whose storage is one of ``storages``."""
    stack, seen = [node], set()
    while stack and len(seen) < _STALE_WALK:
        current = stack.pop()
        leaf = getattr(current, "variable", None)
        if leaf is not None:
            if leaf.untyped_storage()._cdata in storages:
                return True
            continue
        nr = current._sequence_nr()
        if nr in seen:
            continue
        seen.add(nr)
        stack.extend(n for n, _ in current.next_functions if n is not None)
    return False


def _inplace_origins(inner: list) -> list[Site]:
    """Where the ``inplace=True`` modules running in the library frames ``inner`` were made."""
    origins = []
    for frame in inner:
        name = frame.f_code.co_filename.replace(os.sep, "/")
        if name.endswith(("/torch/nn/modules/activation.py", "/torch/nn/modules/dropout.py")):
            made = _MODULE_SITES.get(frame.f_locals.get("self"))
            if made is not None and made not in origins:
                origins.append(made)
    return origins


def _in_function_forward(frame) -> bool:
    """Whether ``frame`` runs inside a custom autograd.Function's forward: grad mode is off there by design and
    what it writes is the Function's own business (its outputs get the Function's backward)."""
    while frame is not None:
        if frame.f_code is _FUNCTION_APPLY:
            return True
        frame = frame.f_back
    return False


def _by(site: Site | None, op: str | None) -> str:
    """`` by `self.fc(x)` `` -- the user's expression on the saving line; torch's op name only without one."""
    said = expression_at(site)
    if said:
        return f" by `{said}`"
    return f" by `{op}`" if op else ""


def _written_by(site: Site, op: str) -> str:
    """The writing expression as the user wrote it (``optimizer.step()``, ``h.data[pad] = 0``); the aten op
    (``in-place `addcdiv_` ``) only when the source is not available."""
    said = expression_at(site)
    return f"`{said}`" if said else f"in-place `{op}`"


def _graph_sequence_nrs(roots) -> set[int]:
    """The sequence numbers of the autograd nodes a backward from ``roots`` (tensors or GradientEdges) reaches."""
    stack = []
    for root in roots:
        node = root.grad_fn if isinstance(root, _Tensor) else getattr(root, "node", None)
        if node is not None:
            stack.append(node)
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        nr = node._sequence_nr()
        if nr in seen:
            continue
        seen.add(nr)
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return seen


skip_dynamo(Tracer.__torch_dispatch__)


def run_traced(body: Callable[[], Any], user: UserCode, enabled: bool = True) -> tuple[Tracer, BaseException | None]:
    """Run ``body`` under a fresh tracer (or, ``enabled=False``, untraced: the benchmark's baseline);
    return the tracer and what ``body`` raised (if anything)."""
    tracer = Tracer(user)
    error = None
    try:
        if not enabled:
            body()
            return tracer, None
        with tracer:
            body()
    except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt and all are results here
        error = exc
    return tracer, error
