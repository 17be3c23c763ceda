"""What the dataflow reports to the rules, and what rules report back.

The interpreter emits a ``Mutation`` for every in-place write to a tensor, with
the abstract state at that moment.  Whether a saved tensor's graph really
reaches a backward is only known at the end of the function, so the engine
fills ``Mutation.conflicts`` before the rules see the event.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..diagnostics import Diagnostic, Related, Severity, Span
from ..messages import LineName, Message, other_file, plain_line
from ..text import code_point_column
from .sharing import Moment
from .values import Grad, ModuleValue, OptimizerValue, Save, Tensor


@dataclass(frozen=True)
class Sink:
    """A place where a graph is used: a backward call, a return, a store that outlives the function."""

    kind: str  # "backward", "return", "escape", "compiled" (a compiled module's forward is called)
    node: ast.AST
    graph: frozenset[int]
    seq: int
    terms: tuple[frozenset[int], ...] = ()  # a backward of a sum: the graphs of its terms
    mark: int = 0  # a backward's: an id drawn as it ran (ids grow, so a save with a lower id was made before it)
    path: tuple[ast.AST, ...] = ()  # a backward's: the followed calls' sites, outermost first, it ran inside
    # A backward that adds into every ``.grad`` it reaches (``loss.backward()``); not ``torch.autograd.grad``, which
    # returns its gradients, nor one given ``inputs=``.
    accumulates: bool = True


@dataclass(frozen=True)
class Conflict:
    save: Save
    sink: Sink


@dataclass(frozen=True)
class Detach:
    """``t.detach()`` or ``t.detach_()`` of a tensor with a graph: where the code cuts a state it carries."""

    node: ast.AST
    path: tuple[ast.AST, ...]  # the followed calls' sites, outermost first, that it ran inside
    seq: int
    graph: frozenset[int]  # the saves reachable from the tensor it detached
    # Put into the detached tensor's own graph (one with a grad_fn) at the detach: a backward whose graph holds it
    # ran through that tensor itself (or what was computed from it), not only through its detached copy.
    marker: int = 0


@dataclass(frozen=True)
class StaleUse:
    """An op run after an update of parameters (a step) on a value whose graph holds a save of those parameters
    made before it: the value is stale.  ``marker`` is put into the op's result graph, so a backward whose graph
    holds it runs through this use."""

    node: ast.AST
    path: tuple[ast.AST, ...]  # the followed calls' sites, outermost first, that the op ran inside
    seq: int  # the op ran after the event with this sequence number and before the next
    inputs: frozenset[int]  # the graph ids of its inputs
    marker: int


@dataclass(frozen=True)
class MixedUse:
    """After an update of parameters, an op on a value computed through them before it (``save``, made stale) and on
    one computed through them after it, whose result reaches the backward ``sink`` only through the ``.detach()``
    at ``cut``: the value mixes the weights before and after the update, silently."""

    use: StaleUse
    save: Save
    cut: ast.AST
    sink: Sink


@dataclass(frozen=True)
class KeptRead:
    """A read, after an update of parameters, of a tensor an object keeps in an attribute (``self.cache =
    encoder(ids)``, read back on a later call) whose graph holds a save the update made stale: ``store`` is the
    assignment that kept it with its graph."""

    store: ast.stmt
    read: ast.AST
    seq: int
    graph: frozenset[int]


@dataclass
class Mutation:
    node: ast.AST  # the statement/expression that writes
    target: Tensor  # the tensor whose memory is written (a view or a base)
    how: str  # "+=", ".add_()", "[...] =", "out=", "inplace=True", "F.relu_()"
    grad_enabled: bool
    seq: int
    advanced_index: bool = False
    module: ModuleValue | None = None  # an inplace=True module applied here
    functional_inplace: bool = False  # F.relu(x, inplace=True), F.relu_(x)
    pending: list[Save] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)  # filled by the engine
    kind: str = "write"  # "write"; "step" (optimizer.step() updating parameters); "data" (through .data);
    # "detach" (`t.detach_()`: no write, but torch refuses it on a view, and on a tensor saved as an input)
    # A `.detach_()` on a tensor certainly a view (torch refuses it at once: "Can't detach views in-place").
    refused_view: bool = False
    # A torch layer's forward updates its own state (`nn.Embedding(max_norm=...)` renormalising its weight): the
    # update is meant, so an op that read that state before is what to change.
    by_layer: bool = False
    grad_mode_known: bool = True  # False when grad mode here depends on a caller we cannot see
    element_loop: bool = False  # an element write indexed by a loop variable (t[i, j] = ...)
    value_grad: Grad = Grad.NO  # whether the values written in require grad (grad mode on)
    frames: list[tuple[ast.AST, int]] = field(default_factory=list)  # (call site, id mark) of followed calls
    # The written memory is handed on by a loop over layers one of which stands for every layer (`for layer in
    # self.layers` of a ModuleList built by a comprehension, run once) to the layers after it, which the run did not
    # make: they may save it too, so ``conflicts`` may miss saves (a clone where saved would leave those).
    unrun_layers: bool = False
    # The written tensor is reached through a Python list or dict (`acts["h"] += 1`): its subscript is not
    # tensor indexing, so a fix must not treat the container's name as the tensor's.
    in_container: bool = False
    # An in-place activation whose backward torch refuses for the negative parameter it is given
    # (`F.leaky_relu_(x, -2)`): (the parameter, its value as written, torch's message) and the marker put into the
    # written tensor's graph.  The engine fills ``sign_reached``: the first later backward whose graph holds it.
    sign_refused: tuple[str, str, str] | None = None
    sign_marker: int | None = None
    sign_reached: Sink | None = None
    # The write is a call's `out=` argument: torch refuses it at the call, with grad mode on, when any input or
    # the `out=` tensor requires grad (out= functions are not differentiable), before any memory is written.
    out_argument: bool = False
    # The written storage was read by an op before this write (its old value is part of a graph).
    read_before: bool = False
    # Filled by the engine: the places that ask for the written tensor's own gradient and get the new value's
    # (a `retain_grad()` before the write; a hook or `autograd.grad(inputs=...)` after it, when it was read before).
    asks: list["GradAsk"] = field(default_factory=list)
    # Filled by the engine: a backward ran earlier in the analysed code, so the write comes between steps (an
    # update or reset of what the next forward reads) rather than inside the computation that backward differentiates.
    after_backward: bool = False
    # A write autograd does not record (`.data`, a `.detach()` alias, a NumPy array, grad mode off) to a tensor
    # with a grad_fn: that tensor (as it was), and the marker put into its graph at the write.  The engine
    # fills ``read_after``: the first later backward whose graph reads the changed tensor.
    hidden_from: Tensor | None = None
    hidden_marker: int | None = None
    read_after: Sink | None = None
    # ``w.data = f(w)`` in a forward: the expressions that gave an op the leaf's new values, in run order (an op's
    # operand; the op itself where its code does not show which, as a layer reading its own weight).  None: not such.
    own_reads: list[ast.AST] | None = None
    # The write goes through a name bound as a second name of another's tensor (`out = x` ... `out[i] = v`):
    # (that binding, the name written through, the other name).  The binding is where a copy was meant.
    alias_site: tuple[ast.stmt, str, str] | None = None
    # The write goes through a name bound to a view of a leaf that requires grad (`b = conv.bias.view(na, -1)` ...
    # `b[:, 4] += p`): that binding.  Where two writes or more go through it, the view is what to change.
    view_site: ast.stmt | None = None
    # The write goes through a name bound by a conversion to the dtype the tensor had already (`x = x.float()` of a
    # float32 `x`: torch returns `x` itself): (that binding, the dtype).  The binding is where a copy was meant.
    conversion_site: tuple[ast.stmt, str] | None = None
    # The written tensor is an inference tensor (made in a `torch.inference_mode()` block) and the write is outside
    # inference mode: where it was made (the statement of the block's own function).
    inference_made: ast.AST | None = None
    # The write runs in a custom Function's forward or backward, whose grad mode autograd turns off itself: the
    # Function's backward gives its outputs' gradients, so a write made out of place there drops no graph.
    in_function: bool = False
    # Saves a custom Function's forward made that torch has not packed yet (it records their versions when that
    # forward returns): the version check misses a write now, and the backward computes with the written values.
    before_packed: frozenset[int] = frozenset()
    # The variable or attribute the write goes through (`out` of `out[i] = v`, `self.scale` of `self.scale.mul_(m)`).
    written_through: ast.expr | None = None
    # Filled by the engine for an update of parameters: the first op after it that takes a value made stale by
    # a save a backward before the update already ran through (a value both losses share), whose result the
    # failing backward runs through; and the conflict of that save.
    stale_use: StaleUse | None = None
    stale_conflict: Conflict | None = None
    # Where the run was at the write: what the code reads afterwards (``sharing.py``).
    moment: Moment | None = None
    # Per save this write finds already made stale by an earlier write, that write, when it runs wherever the save
    # did (the interpreter's ``_staled_first``): the same saved version, written again.
    staled_first: dict[int, "Mutation"] = field(default_factory=dict)
    # The stale value was made for the failing backward alone, before the update, and the loop carries it into its
    # next iteration, where the use (earlier in the loop's code than the update) builds that backward's loss on it.
    stale_carried: bool = False
    # The stale value is a state the code detaches, but only after the loop that runs the update has run it again
    # (and the failing backward with it): that detach, which belongs in the loop that updates.
    stale_detach: Detach | None = None
    # The stale value reached the use from an attribute of an object that kept it, graph and all, from before the
    # update (a cache filled once, a state kept between calls): that assignment is the line to change.
    stale_kept: KeptRead | None = None
    # Filled by the engine for an update of parameters that applies a backward's gradients (the last one before
    # it reaches them), when the loss that fails was computed before that backward, from a forward no backward
    # before the update ran through, and is itself applied by an update of other parameters (a policy's loss
    # computed through the critics before the critics' steps): that conflict, whose save is in that forward.
    early_forward: Conflict | None = None
    # Filled by the engine for an update whose stale graph no backward reaches: the first op after it that mixes a
    # value computed through the updated parameters before it with one computed after it, used only detached.
    mixed: MixedUse | None = None
    # Filled by the engine for an optimizer step that breaks a later backward, after a backward it applies: what
    # ran after the step and may touch its parameters' gradients or weights, each as (the node, the followed calls'
    # sites it ran inside, whether it does): every clear and step of gradients (it does when it reaches them), a
    # read of them, a backward other than those the step breaks that adds to them, a forward through the weights it
    # updated (a save of them).  None when anything may (the code writes gradients itself, or a backward of a value
    # not known may reach them).
    touched_after: list[tuple[ast.AST, tuple[ast.AST, ...], bool]] | None = None

    @property
    def silent_before_packing(self) -> bool:
        """Every save the write breaks was made by the custom Function's forward it runs in, which has not returned:
        torch packs them then (``before_packed``), so nothing raises and the backward computes with the written
        values."""
        return bool(self.before_packed) and all(c.save.id in self.before_packed for c in self.conflicts)

    def call_path(self) -> list[ast.AST]:
        """The call sites, outermost first, of the followed calls the write is inside (its finding stays on the
        write, where the fix goes; these explain how the caller's tensor gets there)."""
        return [site for site, _ in self.frames]

    def entry(self) -> ast.AST:
        """The statement of the analysed function's story that leads to the write: the write itself when the
        written (or saved) tensor was made inside the innermost followed call, else the call site of the
        outermost call the tensor predates.  Ids grow monotonically, so an id below a frame's mark predates
        that call.  Fixes that move statements around a backward move this one."""
        if not self.frames:
            return self.node
        # A step writes parameters, which always predate the calls: where its conflicting graph was saved counts.
        written = [] if self.kind == "step" and self.conflicts else [
            t.storage.id for t in (self.target.group or (self.target,))]
        key = min([c.save.id for c in self.conflicts] + written)
        node = self.node
        for site, mark in reversed(self.frames):
            if key >= mark:
                break
            node = site
        return node


def in_function_of(path: tuple[ast.AST, ...], node: ast.AST, update_path: list[ast.AST]) -> ast.AST:
    """``node``, reached through the followed calls ``path``, as a line of the function that runs the update (whose
    calls are ``update_path``): the call site there that leads to it, or the node itself when it is there."""
    common = 0
    while common < len(path) and common < len(update_path) and path[common] is update_path[common]:
        common += 1
    return path[common] if common < len(path) else node


@dataclass
class StepRun:
    """One ``optimizer.step()`` as it ran: what gradients it applies (the grad sources of its parameters)."""

    optimizer: OptimizerValue
    node: ast.AST
    seq: int
    sources: frozenset[int]
    path: tuple[ast.AST, ...]  # the followed calls' sites it ran inside, outermost first
    name: str  # the optimizer as the code names it
    closure: bool  # `step(closure)`: the closure clears and recomputes the gradients itself


@dataclass
class StaleStep:
    """A step that applies gradients an earlier step of the same optimizer already applied: nothing cleared them
    since (no ``zero_grad()``), and a backward added to them, so the sum is applied (silently).  ``node`` is the
    line to change: the first of those backwards in the function that runs the step, before it, else the step."""

    node: ast.AST
    step: StepRun
    first: StepRun
    backwards: list[Sink]  # the backwards that added to the applied gradients, in order


@dataclass
class LoadedCopy:
    """``target.load_state_dict(source.state_dict())``: ``target`` holds a copy of ``source``'s weights, which stays
    fixed while an optimizer trains ``source`` (a target network, a teacher).  ``replaced``: the statement that then
    stored ``source`` itself where ``target`` was held (``self.target = self.online``), before the copy computed
    anything; from there on every step of an optimizer of ``source`` changes what is read through that name."""

    node: ast.AST  # the load
    target: ModuleValue
    source: ModuleValue
    seq: int
    used: bool = False  # the copy ran (a forward of it) after the load
    replaced: ast.stmt | None = None
    replaced_seq: int = 0
    step: StepRun | None = None  # filled by the engine: the first step after the replacement that trains ``source``


@dataclass
class DiscardedUpdate:
    """``p.grad.clamp(-1, 1)`` as a statement: an out-of-place op on a gradient (or on a ``.data``, or a parameter
    under no_grad) whose result nothing keeps, so the tensor is unchanged where its in-place twin was meant."""

    node: ast.Call
    method: str  # "clamp"
    twin: str  # "clamp_"
    what: str  # how messages name the tensor left unchanged
    gradient: bool  # the tensor is a gradient an update reads


@dataclass
class GraphBreak:
    """A tensor that requires grad is rebuilt without its graph (``torch.tensor(t)``, ``.item()`` round trips)."""

    node: ast.AST
    how: str  # "torch.tensor(...)", "t.new_tensor(...)", "torch.from_numpy(...)"
    sources: frozenset[int]  # grad sources (leaves) whose gradient path this line cuts
    marker: int  # an id put into the rebuilt tensor's graph, to see whether it reaches a backward
    origin: ast.AST | None = None
    certain: bool = True  # False when the tensor only maybe requires grad
    reached: Sink | None = None  # filled by the engine: the backward (or forward's return) the value reaches
    # A `.detach()`/`.data` cut: often meant (a target network, a stop-gradient), so it is reported only when a
    # gradient the code reads (an optimizer step, a manual update) is starved by it; filled by the engine.
    cut: bool = False
    starved: "GradRead | None" = None
    # A cut value that is a whole term of a loss a backward runs from (``loss = ce + aux.detach()``): that term
    # adds nothing to any gradient.  The backward's node.
    dead_in: ast.AST | None = None
    # A cut value a term of a loss is built on, when that term reaches none of the parameters the optimizer
    # stepped after the backward steps while other terms do (``D(fake.detach())`` in the generator's loss): the
    # backward and the step, filled by the engine.
    term_starved: "tuple[Sink, GradRead] | None" = None
    # The values become a Python number (or NumPy value) that ``.backward()`` is called on: it has none, so Python
    # raises AttributeError there.  That call's node.
    number_backward: ast.AST | None = None
    # Numbers this line read out were made a tensor again on another line (`torch.tensor(values)`): that line.
    rebuilt_at: ast.AST | None = None
    # The list object the numbers were appended to (``values.append(v.item())``), as the run saw it.
    appended_to: object | None = None
    # The rebuild read that very list, all of whose elements are numbers this line read out (True), or another
    # list (False); None when the run does not tell (or the list holds other values too).  Whatever names the
    # two lines give it.
    rebuilds_its_list: bool | None = None
    # Numbers this line read out were also an operand of a tensor op (``ret - v``, ``v`` a number): the first such
    # op.  There they serve as a constant, which keeping the tensor instead would give the tensor's graph.
    constant_in: ast.AST | None = None
    # Numbers read out of a tensor (``float(t)``, ``t.item()``): an id put into that tensor's own graph, to see
    # whether the tensor itself (not only what it was computed from) reaches the backward the numbers reach.
    kept_marker: int = -1
    # The read is what a helper returns (`return t.detach().numpy()`): its callers decide what the numbers become.
    handed_back: bool = False
    # The values come from one tensor (``torch.tensor(t)``, ``x.new_tensor(t)``), not a list or a number: a fix
    # may keep that tensor as it is, where it could not keep a list's.
    of_tensor: bool = False
    # The values come from one list or tuple whose elements the run knows (``torch.tensor(self.log_probs)``):
    # "tensors" when each is a tensor, "computed" when some are results of code the analysis cannot see into
    # (``dist.log_prob(a)``), "mixed" when some are not tensors.  A fix may stack a list of tensors.
    of_list: str | None = None
    # A cut whose values are cut again (``t.data`` then ``.detach()``): dropping this one alone keeps them cut.
    cut_again: bool = False
    # ``s = s.data.clone()`` then ``s[rows] = v`` with ``v`` computed from the old ``s`` with its graph: the written
    # part keeps the history this line cut, the rest does not.  The write.
    kept_in_part: ast.AST | None = None
    # A term of a loss computed only from values made with grad mode off (a model's output under no_grad, copied
    # into a buffer), read where `node` is: the op that ran with grad mode off and what turned it off.
    grad_off: tuple[ast.AST, ast.AST] | None = None
    # A name rebound with grad mode off to a value computed from its old one (``pred = ema(pred)`` under no_grad):
    # the switch that turned grad mode off (a ``no_grad`` block, ``set_grad_enabled(False)``), so that turning it
    # back on for that statement alone keeps the graph.  None inside ``torch.inference_mode()``, where it would not.
    switched_off: ast.AST | None = None


@dataclass
class GradOffBackward:
    """``.backward()`` on a tensor computed, with grad mode off, from tensors that require grad: autograd recorded
    no graph, so the tensor has no grad_fn and backward raises."""

    backward: ast.AST  # the backward call
    node: ast.AST  # the line to change: the switch, or the call a `@torch.no_grad()` function runs the op through
    computed: ast.AST  # the last op the tensor was computed by that ran with grad mode off
    turned_off: ast.AST  # what turned grad mode off: a `with torch.no_grad()`, a call, a decorator
    label: str  # the tensor backward runs from, as messages name it


@dataclass
class NumpyRefused:
    """A NumPy function given a tensor that requires grad to turn into an array: torch raises at once."""

    node: ast.Call
    function: str  # "np.sum"
    label: str  # the tensor, as messages name it
    in_list: bool  # one of the tensors of a list or tuple handed to it
    every_tensor: bool = False  # in_list, and every element of the list is a tensor


@dataclass
class UnreturnedLoss:
    """A Lightning-style ``training_step`` that computes a tensor that requires grad and returns nothing: the
    trainer's automatic optimization backpropagates and steps only on what the hook returns."""

    node: ast.AST  # the hook's last statement: where the value was to be returned
    hook: str
    label: str  # the last tensor computed there that requires grad, as messages name it
    computed: ast.AST  # where it is computed


@dataclass
class InertFlag:
    """``module.requires_grad = False`` on an ``nn.Module``: a plain attribute that nothing in torch reads (the
    method ``requires_grad_()`` is what reaches its parameters), so the parameters keep requiring grad."""

    node: ast.AST
    module: ModuleValue
    name: str  # the module as the code names it
    seq: int
    reached: Sink | None = None  # filled by the engine: the first later backward whose graph reaches them
    updated: "GradRead | None" = None  # filled by the engine: the first later update of them after that backward


@dataclass
class GuardedUnfreeze:
    """``if p.requires_grad: p.requires_grad = flag`` run with ``flag`` true on parameters that an earlier write froze:
    the guard reads the very flag the body writes, so it is False for each of them and the write that was to
    unfreeze them never runs (such a setter can freeze, never unfreeze)."""

    node: ast.If
    frozen: ast.AST  # the write that froze them (or the call that made it)
    value: str  # the true value the skipped write would have set, as the code writes it
    call: ast.AST | None  # the call that ran the setter with that value (None: the guard runs at this level)
    seq: int
    # Every one of them was frozen by the guarded write itself (the setter run earlier with a false value): without
    # the guard, the write unfreezes only what it froze, never a parameter frozen on purpose by other code.
    own: bool = False
    reached: Sink | None = None  # filled by the engine: the next backward, which gives them no gradient


@dataclass
class ReplacedParameter:
    """A module's parameter or submodule replaced (``q.scale = nn.Parameter(v)``, ``model.fc = nn.Linear(...)``)
    after an optimizer took the one it replaces: the optimizer keeps updating the old tensors, which the model
    no longer uses, and the new ones get gradients no optimizer applies."""

    node: ast.AST
    name: str  # the attribute as the code names it
    new: Tensor | ModuleValue
    optimizer: OptimizerValue  # one that holds what was replaced
    seq: int
    reached: Sink | None = None  # filled by the engine: a later backward that reaches the new parameters
    # The line to change: the statement that makes the replacement (the assignment, or the call of the helper
    # that makes it) in the innermost function of the call path that has the optimizer in hand (a variable, an
    # argument, an attribute of its instance), where it can be built after the replacement or given the new
    # parameters.
    site: ast.AST | None = None
    # The optimizer's construction, when it is just before that line in its block, with nothing between reading the
    # optimizer (``stale_optimizers.py``): then the line to change (build the optimizer after the replacement).  An
    # ``ast.Assign``, or an ``ast.Expr`` that is the call of the helper that built it (a closure binding it nonlocal).
    built: ast.stmt | None = None
    use: ast.AST | None = None  # filled by the engine: a step of the optimizer after the replacement


@dataclass
class CopyTrained:
    """A deep copy of a module (``copy.deepcopy(model)``: parameters of its own) trained with an optimizer built
    on the original: a backward gives the copy's parameters gradients no optimizer holds, and the step updates
    only the original's, which no backward reaches.  The copy never changes."""

    node: ast.AST  # the deepcopy call
    original: ModuleValue
    copy: ModuleValue
    seq: int
    # Calls handed the copy together with an optimizer that holds the original's parameters (a constructor of
    # the object that will train the copy): (call, optimizer, the argument giving the copy, the argument giving
    # the optimizer), an argument None when the call's arguments do not say.  The first one of the stepping
    # optimizer is the line to change.
    paired: list = field(default_factory=list)
    # The `torch.save` that serialised the optimizer apart from the module (see ``pickling.py``): its load holds
    # parameters of its own, and ``original`` is the module that load made for it.
    separated: ast.AST | None = None
    loaded: bool = False  # ``node`` is the optimizer's `torch.load` (no deep copy)
    # filled by the engine
    optimizer: OptimizerValue | None = None
    step: ast.AST | None = None
    reached: Sink | None = None

    @property
    def site(self) -> ast.AST:
        if self.separated is not None:
            return self.separated
        return next((call for call, o, *_ in self.paired if o is self.optimizer), self.node)


@dataclass(frozen=True)
class GradRead:
    """A place that uses the gradients of some grad sources: an optimizer's step, a `.grad` read under no_grad."""

    node: ast.AST
    sources: frozenset[int]
    what: str  # "`opt.step()`", "`w.grad`"
    seq: int = 0
    # An update of parameters (an optimizer's step, a `.grad` read under no_grad), not a plain look at a gradient
    # (`return x.grad` after a backward): a missing gradient then means those parameters never learn.
    updates: bool = True
    # A look at the gradient of parameters an optimizer holds (the optimizer it was built on): the code means them
    # to be trained, so a gradient missing there is one its step would miss too.
    held_by: ast.AST | None = None
    path: tuple[ast.AST, ...] = ()  # the followed calls' sites, outermost first, it ran inside


@dataclass
class Rebind:
    """A name (or attribute) that held a leaf requiring grad is bound, under no_grad, to a new tensor that does not
    (``w = w - lr * w.grad``).  The leaf the optimizer holds and the tensor the next forward reads part ways; it
    matters only when a later backward runs through the new tensor and something then reads the gradient it
    does not get (filled by the engine)."""

    node: ast.AST
    name: str  # "`w`", "`self.w`"
    sources: frozenset[int]  # the old leaf's grad source
    marker: int  # put into the new tensor's graph, to see which backward reads it
    seq: int
    reached: Sink | None = None  # the first later backward through the new tensor
    starved: GradRead | None = None  # the first read, after that backward, of the gradient that never arrives
    next_call: bool = False  # an attribute rebound after the method's own backward: the next call's backward


@dataclass(frozen=True)
class GradAsk:
    """A tensor's own gradient is asked for: ``t.retain_grad()``, ``t.register_hook(f)``,
    ``torch.autograd.grad(..., inputs=t)``.  autograd answers for the tensor's version at that moment
    (retain_grad follows later in-place versions), so a write in between changes which value it is."""

    how: str  # "retain_grad", "register_hook", "autograd.grad"
    node: ast.AST
    storage: int
    seq: int


@dataclass
class HookWrite:
    """A gradient hook writes the gradient it is given in place (see ``hooks.py``)."""

    node: ast.AST  # the write, inside the hook
    how: str  # "`.clamp_()`", "`*=`", "`[...] =`"
    registered: ast.AST  # the `register_hook(...)` call
    register: str  # "register_hook", "register_full_backward_pre_hook"
    moment: Moment | None = None  # the write's, as the run of the hook saw it (``Moment.entered_at`` its call)
    entry: ast.AST | None = None  # the call torch ran the hook through, when not ``registered`` (a module's call)

    def entered(self) -> tuple[int, ast.AST] | None:
        """(depth, function) of the hook's own frame in the run of the write (None when the run did not see it)."""
        return self.moment.entered_at(self.entry or self.registered) if self.moment is not None else None


Event = Mutation | GraphBreak | HookWrite | Rebind


# The codes whose findings are writes on a chain, by what makes the chain one story: the same saves waiting, the same
# leaf, the same multi-view piece (``engine._one_chain_one_finding`` merges a chain's later writes into its first).
CHAIN_REASON = {"GG001": "saved", "GG005": "saved", "GG002": "leaf", "GG004": "multi-view"}


@dataclass
class Finding:
    """What a rule reports.  Rules may give plain text where no line is named; it is kept as a ``Message``."""

    code: str
    node: ast.AST
    message: Message
    certain: bool = True
    related: list[tuple[ast.AST, Message]] = field(default_factory=list)
    # The write (or step, or graph break) the finding is about: what the fixes, the explanation and the engine's
    # one-finding-per-place read.  None for findings about something else (a hook's write, a flag).
    mutation: Mutation | None = None
    # Other facts a rule's ``fix`` hook needs (e.g. ``{"state": ...}``); never shown, never serialised.
    data: dict = field(default_factory=dict)
    fix_memo: tuple | None = None  # (Fix or None,) once computed: cached findings keep their fix
    # True once moved (``moved.py``) before its fix was built: ``data``'s nodes are still at the old lines, so
    # its fix must be built from a fresh analysis of its function (``api.FixesOnDemand``), never from it.
    data_stale: bool = False
    # Findings at the same place from other functions' analyses, dropped as duplicates of this one; they
    # share its fix_memo, so that each can later be moved with its own function (see ``moved.py``).
    twins: list = field(default_factory=list, repr=False, compare=False)
    # Later writes of the same chain, kept as related lines of this one (``engine._one_chain_one_finding``): the
    # fix mends them with it, since mending the first does not always hand them another tensor.
    merged: list = field(default_factory=list, repr=False, compare=False)
    # A twin's analysis (a caller's, with the values its code makes) saw saves of the written memory that this
    # finding does not name: a repair at the saves it names is not the whole repair.
    saves_elsewhere: bool = False
    # The editor's view of a finding placed in another module of the project (``engine._in_this_file``): that
    # finding, at its own line there, whose fix (in that file) this one offers.
    placed: "Finding | None" = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.message = _message(self.message)
        self.related = [(node, _message(note)) for node, note in self.related]

    @property
    def place(self) -> tuple[str, int, int]:
        """What the finding is known by: its code and where its node starts (line, byte column).  Two analyses
        reporting the same place report the same finding."""
        return self.code, getattr(self.node, "lineno", 0), getattr(self.node, "col_offset", 0)

    @property
    def entry_line(self) -> int:
        """The line of the statement its write (or the call leading to it) is made on (``Mutation.entry``): how a
        fix's check finds it again in a changed text (``fixes.identity.FindingId.line``)."""
        return self.mutation.entry().lineno if self.mutation is not None else self.node.lineno

    @property
    def backward_lines(self) -> set[int]:
        """The lines of the backwards its write breaks (``FindingId.backward_line``)."""
        conflicts = self.mutation.conflicts if self.mutation is not None else ()
        return {c.sink.node.lineno for c in conflicts if c.sink.kind == "backward"}

    def to_diagnostic(self, path: str, severity: Severity, lines: list[str], line_name: LineName = plain_line
                      ) -> Diagnostic:
        """The finding as output: positions in code points, texts rendered with ``line_name`` naming lines (with
        the analysed file's name when the finding is placed in another file, where a bare "line 12" would be
        read as that file's)."""
        own = other_file(self.node)  # a finding placed in another module of the project (``engine._placed``)
        if own is not None:
            named = line_name
            line_name = lambda number: f"{named(number)} of {os.path.basename(path)}"  # noqa: E731
        related = []
        for node, note in self.related:
            if node is None:
                continue
            elsewhere = other_file(node)  # a line of another module of the project the analysis followed
            span = span_of(node, lines if elsewhere is None else [])
            related.append(Related(path if elsewhere is None else display_path(elsewhere, path), span.line,
                                   span.column, note.render(line_name)))
        if own is not None:
            return Diagnostic(display_path(own, path), span_of(self.node, file_lines(own)), self.code, severity,
                              self.message.render(line_name), tuple(related))
        return Diagnostic(path, span_of(self.node, lines), self.code, severity, self.message.render(line_name),
                          tuple(related))


def file_lines(path: str) -> list[str]:
    """The lines of another module's file as it is on disk now (none when it cannot be read)."""
    try:
        text = Path(path).read_bytes().decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()


def display_path(other: str, analysed: str) -> str:
    """Another module's file as output names it: beside the analysed file's display path, as the CLI shows it."""
    try:
        relative = os.path.relpath(other, os.path.dirname(os.path.abspath(analysed)))
    except ValueError:  # another drive
        return other
    return os.path.normpath(os.path.join(os.path.dirname(analysed), relative))


def _message(text: Message | str) -> Message:
    return text if isinstance(text, Message) else Message.text(text)


def _column(lines: list[str], line: int, byte_offset: int) -> int:
    """``ast`` counts UTF-8 bytes; diagnostics count code points (1-based)."""
    return code_point_column(lines[line - 1] if 1 <= line <= len(lines) else "", byte_offset) + 1


def span_of(node: ast.AST, lines: list[str]) -> Span:
    line = getattr(node, "lineno", 1)
    end_line = getattr(node, "end_lineno", None) or line
    col = _column(lines, line, getattr(node, "col_offset", 0))
    end_col = _column(lines, end_line, getattr(node, "end_col_offset", None) or getattr(node, "col_offset", 0))
    return Span(line, col, end_line, end_col)
