"""Tensor dataflow over one function body, in statement order.

An abstract interpreter: it walks statements once (loop bodies twice, so that a
tensor saved in iteration i-1 meets the write of iteration i), keeps an
environment of abstract values, records which tensors ops save for backward
(from the generated torch knowledge), and emits a ``Mutation`` for every
in-place write plus ``Sink``s where graphs are used.  It never raises on odd
code: anything it does not understand becomes ``UNKNOWN``, which no rule flags.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field, replace

from .. import statements
from ..knowledge import TorchKnowledge
from .accumulation import without_gradient
from .calls import CallsMixin
from .classes import ClassInfo, bind, find_setter, mro, own_method
from .events import (Detach, DiscardedUpdate, GradAsk, GradOffBackward, GradRead, GraphBreak, GuardedUnfreeze, HookWrite,
                     InertFlag,
                     CopyTrained, KeptRead, Mutation, NumpyRefused, Rebind, ReplacedParameter, Sink, StaleUse, StepRun, LoadedCopy,
                     UnreturnedLoss)
from .dtypes import DtypesMixin, file_default_dtype
from .expressions import BINARY_OPS, ExpressionsMixin, _const_int, _const_key, _numbers
from .extension_points import ExtensionPointsMixin
from .followed import FollowedCall, FollowedCallsMixin, used_as_sequences
from .hooks import named_submodules
from .imports import normalize, qualified_name
from .jedi_oracle import MODULE_PREFIX, PARAMETER, TENSOR, JediOracle
from .outer_writes import OuterWrites
from .project import Project
from .saves import SaveLog
from .sharing import Repeats, RunLog, Skipped, carried_names, storages_in
from .stale_optimizers import built_just_before
from .state import GRAD_OFF_CONTEXTS, GRAD_ON_CONTEXTS, SET_GRAD, State, merge_states
from .values import (
    MAX_TERMS,
    literal_modules,
    NOT_TENSOR,
    PLAIN,
    UNKNOWN,
    ClassRef,
    Const,
    DataAlias,
    Derived,
    FunctionContext,
    FunctionValue,
    Grad,
    NumberFrom,
    OptimizerValue,
    ParamGroups,
    ModuleValue,
    ModuleIterable,
    Opaque,
    ParamIterable,
    Save,
    Serialised,
    Storage,
    Tensor,
    TensorMap,
    TensorSeq,
    Value,
    graph_of,
    int_const,
    is_plain_data,
    graph_tensor_behind,
    new_id,
    new_tensor,
    snapshot,
    truth,
    view_of,
)

# Statements run, expressions evaluated and calls followed in one analysis (an ``Interpreter``): a loop runs
# its body twice, so the work doubles with each level of nested loops (and followed calls run their callee's
# body again).  Past this many steps (about a second) the analysis stops, and the engine reports the function
# as not analysed (GG903).  Of the 2,584 files of the fixtures, examples and torch's own sources, the most a
# unit takes is 154,000 (the top level of a 1.3 MB generated table); functions take at most 71,000.
MAX_STEPS = 500_000
# statement type -> the function of its method (``_stmt_Assign``) or None, looked up once (see ``eval``).
_STMT_FUNCTIONS: dict[type, object] = {}


# Loops run their body twice (iteration i-1's saves meet iteration i's writes), so a nest of n loops runs its
# innermost body 2**n times: only the innermost DOUBLED_LOOP_LEVELS of a nest run twice, those around them once.
DOUBLED_LOOP_LEVELS = 4


def _loops_inside(loop: ast.stmt) -> int:
    """How many loops nest inside ``loop``'s body at most (0: none), not counting the functions and classes it
    defines, nor loops that run once.  Read from the syntax alone, so kept on the node: a loop runs again at each
    iteration of the loops around it and at each followed call of its function (about 2 % of the analysis)."""
    return statements.syntax_fact(loop, "_gradguard_loops_inside", _count_loops_inside, loop)


def _count_loops_inside(loop: ast.stmt) -> int:
    deepest, todo = 0, [(child, 0) for child in statements.nested(loop)]
    while todo:
        node, around = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.While) or (isinstance(node, (ast.For, ast.AsyncFor)) and not _runs_once(node.iter)):
            around += 1  # a loop whose body runs once (`for _ in range(1)`) multiplies no work
            deepest = max(deepest, around)
        todo.extend((child, around) for child in statements.nested(node))
    return deepest


SAVES_KEPT_PER_OP = 4  # pending saves one write keeps of each op, role and memory: the first and the last two


def _few_of_each(saves) -> list[Save]:
    """The saves a write invalidates, at most ``SAVES_KEPT_PER_OP`` of each op, role and storage (the first two
    and the last two made).  Loops run twice, so nested loops make an op save the same memory again and again:
    without the bound, each write of 14 nested loops kept every earlier save (memory quadratic in the steps:
    gigabytes before ``MAX_STEPS``); code with two levels of loops or fewer keeps every save it made.  Saves of
    other memory are not repeats: one layer line run by several networks saves each network's weight (a step
    over all of them must keep each)."""
    groups: dict[tuple[int, str, int], list[Save]] = {}
    for save in sorted(saves, key=lambda s: s.id):  # as made: the storages may come in any order
        group = groups.setdefault((id(save.node), save.role, save.storage.id), [])
        if len(group) == SAVES_KEPT_PER_OP:
            del group[2]  # keep the first two; the last ones follow
        group.append(save)
    return sorted((s for group in groups.values() for s in group), key=lambda s: s.id)


def _certainly_a_view(tensor: Tensor) -> bool:
    """A view for torch too: made by basic indexing or a view op, not by one that may copy instead."""
    return tensor.base is not None and not tensor.maybe_copy


def _store(container: TensorSeq | TensorMap, index: ast.expr, value: Value) -> bool:
    """``xs[i] = value`` at a constant index or key the container has; nothing otherwise (False)."""
    key = _const_key(index)
    if isinstance(container, TensorMap) and key in container.items:
        container.items[key] = value
    elif isinstance(container, TensorSeq) and container.base is None and isinstance(key, int) \
            and -len(container.items) <= key < len(container.items):
        container.items[key] = value
    else:
        return False
    return True


def _forget_items(container: TensorSeq | TensorMap) -> None:
    """A write to an element the analysis cannot tell: every element is unknown from now on."""
    if isinstance(container, TensorMap):
        container.items = {k: UNKNOWN for k in container.items}
    elif container.base is None:
        container.items[:] = [UNKNOWN for _ in container.items]


class TooManySteps(Exception):
    """The analysis of one function took more than ``MAX_STEPS`` steps."""


_UNROLLED_LAYERS = 16  # a loop over a module list runs its body once per layer up to this many layers
# `flag |= other` (`&=`, `^=`) on bools gives a bool
_LOGICAL_OPS = {ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor}
_AUG_SYMBOL = {ast.Add: "+=", ast.Sub: "-=", ast.Mult: "*=", ast.Div: "/=", ast.FloorDiv: "//=", ast.Mod: "%=",
               ast.Pow: "**=", ast.MatMult: "@=", ast.BitAnd: "&=", ast.BitOr: "|=", ast.BitXor: "^="}


@dataclass
class Context:
    """What is shared by every function of one file."""

    knowledge: TorchKnowledge
    imports: dict[str, str]
    classes: dict[str, ClassInfo]
    depth: int = 0
    oracle: "JediOracle | None" = None  # asked about calls into other modules of the project
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)  # the file's module-level functions
    # each function's names used as lists (``used_as_sequences``), read once per file however often it is called
    sequence_names: dict[ast.AST, frozenset[str]] = field(default_factory=dict)
    local_names: dict[ast.AST, frozenset[str]] = field(default_factory=dict)  # each function's locals (scopes.py)
    # each `@contextmanager` generator's two parts (before and after its yield), split once per file
    generator_parts: dict[ast.AST, object] = field(default_factory=dict)
    path: str | None = None  # the module's file: the analysed file, or a project module a call was followed into
    project: Project | None = None  # the project's other modules, which calls are followed into
    # the contexts of the project modules calls were followed into, by path (shared by every copy of this one)
    module_contexts: dict[str, "Context"] = field(default_factory=dict)
    # The file's units (functions; None for the top level) that train: they follow calls into the project's modules.
    training_units: frozenset = frozenset()
    # A module of the project that the file imports turns grad mode off at its top level (``Project.
    # grad_off_on_import``): the switch, after which the file's code runs with grad mode off.
    grad_off_import: ast.AST | None = None
    # The dtype of the file's floating tensors when nothing names another; None when the file (or, for a module
    # calls were followed into, the analysed file) may change it (see ``dtypes.file_default_dtype``).
    default_dtype: str | None = None

    def class_of(self, value: Value) -> ClassInfo | None:
        """The class of the file, or of a project module, that an instance was made from."""
        cls = getattr(value, "user_class", None)
        if cls is None:
            return None
        if value.bound_class is not None:
            return value.bound_class
        info = self.classes.get(cls.name)
        if info is not None and info.node is cls:
            return info
        return self.project.class_info(cls) if self.project is not None else None

    def classes_for(self, info: ClassInfo | None) -> dict[str, ClassInfo]:
        """The classes of the module ``info`` is defined in (its bases are looked up by name there); its bases
        imported from the project's other modules resolved first (for an entry script's analysis, see
        ``Project.entry_script``)."""
        if info is not None and self.project is not None and self.project.entry_script and (
                info.module_path is not None or self.classes.get(info.name) is info):
            self.project.resolve_bases(info, self.path)
        if info is None or info.module_path is None or info.module_path == self.path or self.project is None:
            return self.classes
        module = self.project.module(info.module_path)
        return module.classes if module is not None else self.classes

    def for_module(self, path: str | None) -> "Context":
        """The context to run code of the module at ``path`` in (this one for the analysed file)."""
        if path is None or path == self.path or self.project is None:
            return self
        if path not in self.module_contexts:
            module = self.project.module(path)
            if module is None:
                return self
            self.module_contexts[path] = Context(
                self.knowledge, module.imports, module.classes, self.depth, None, module.functions,
                path=module.path, project=self.project, module_contexts=self.module_contexts,
                default_dtype=self.default_dtype if file_default_dtype(module.tree, self.knowledge) else None)
        return self.module_contexts[path]


class Interpreter(ExpressionsMixin, CallsMixin, FollowedCallsMixin, ExtensionPointsMixin, DtypesMixin):
    """Runs one function (or the module's top level) and collects mutations and sinks."""

    step_limit = MAX_STEPS  # read by the steps counted inline (``eval``, ``run_stmt``); past it, ``count_step``

    def __init__(self, ctx: Context, self_value: ModuleValue | None = None):
        self.ctx = ctx
        self.k = ctx.knowledge
        self.state = State()
        # `if`s with an unknown test around the running statement: a change to an object there (`m.inplace = True`)
        # is not known to happen, so it changes nothing the analysis claims
        self.unsure_branches = 0
        self.saves = SaveLog()
        self.mutations: list[Mutation] = []
        self.sinks: list[Sink] = []
        self.seq = 0
        self.self_value = self_value
        self.written_names: set[str] = set()  # names written in place in this unit: worth asking jedi about
        self.breaks: list[GraphBreak] = []
        self.grad_reads: list[GradRead] = []  # optimizer steps and manual updates: gradients the code relies on
        self.asks: list[GradAsk] = []  # where a tensor's own gradient is asked for
        self.hook_writes: list[HookWrite] = []
        # `ctx` of each custom Function's forward running now, with whether its inputs require grad
        self.function_contexts: list[tuple[FunctionContext, Grad]] = []
        self.rebinds: list[Rebind] = []  # leaves requiring grad rebound under no_grad to new tensors
        # Open `with torch.inference_mode():` blocks, each the number of followed calls open when it was entered.
        self.inference_blocks: list[int] = []
        self.discarded: list[DiscardedUpdate] = []  # `p.grad.clamp(...)` as a statement: an update that changes nothing
        self.discarded_call: ast.AST | None = None
        self.flags: list[InertFlag] = []  # `module.requires_grad = False`: attributes torch never reads
        # `p.requires_grad = flag` / `p.requires_grad_(flag)` on tensors: per tensor, the last write, on a path known
        # to run; tensors written on a path not known to run are in `unsure_flags` (their flag is not known).
        self.flag_writes: dict[int, tuple[ast.AST, tuple[ast.AST, ...]]] = {}  # (the write, the calls it ran in)
        self.unsure_flags: set[int] = set()
        self.guarded_unfreezes: list[GuardedUnfreeze] = []  # `if p.requires_grad: p.requires_grad = True` skipped
        self.optimizers: list[OptimizerValue] = []  # built in this run
        self.replaced: list[ReplacedParameter] = []  # parameters replaced after an optimizer took them
        self.copies: list[CopyTrained] = []  # `copy.deepcopy(module)`: modules with parameters of their own
        # Copies made by deep copies and loads (see ``pickling.py``): id of the copy -> (the copy, its original's id);
        # and each optimizer a `torch.load` made -> the `torch.save` that wrote it.
        self.copy_origins: dict[int, tuple] = {}
        self.loaded_at: dict[int, ast.AST] = {}
        self.saved_files: dict[str, Serialised | None] = {}  # `torch.save(obj, "a.pt")`: what the file holds
        self.state_copies = 0  # inside `__setstate__` of a deep copy being made
        self.loads_apart: list[tuple] = []  # (module a loaded optimizer's parameters belong to, its save, its load)
        self.loaded_modules: list[tuple] = []  # (module a load made, the load)
        # A gradient written by the code (`p.grad = g`, `p.grad.copy_(g)`): a step may apply one no backward gave.
        self.grads_written = False
        self.optimizer_steps: list[tuple[OptimizerValue, ast.AST, int]] = []  # each step: (optimizer, call, seq)
        # Gradient accumulation across steps (see ``accumulation.py``): each step as it ran, the clears of gradients
        # (sequence number, the optimizer or module whose gradients are cleared, None: any; the call and the followed
        # calls' sites it ran inside), and the objects handed to code the analysis cannot see (which may clear or step
        # them there).
        self.step_runs: list[StepRun] = []
        self.grad_clears: list[tuple[int, Value | None, ast.AST, tuple[ast.AST, ...]]] = []
        self.zero_filled = False  # a `zero_grad()` that may leave gradients of zeros (not `None`) ran
        self.escaped: list[Value] = []
        self.loads: list[LoadedCopy] = []  # `a.load_state_dict(b.state_dict())`, see ``LoadedCopy``
        self.cut_markers: set[int] = set()  # the markers `.detach()`/`.data` cuts put into the graphs they start
        # Markers put into the results of ops run with grad mode off on tensors that require grad (autograd records
        # nothing there): each one's op, the line to change (the switch, or the call a no_grad-decorated function
        # runs the op through) and the switch.
        self.grad_off_ops: dict[int, tuple[ast.AST, ast.AST, ast.AST]] = {}
        # Each such marker's grad sources (what the value would have been differentiated to), and the first op that
        # read the value with grad mode on (where a loss takes it up).
        self.grad_off_sources: dict[int, frozenset[int]] = {}
        # Each such marker's opaque markers (below) its value already held: a graph holding any other one took a
        # value not known after the value was made, with grad mode on or off.
        self.grad_off_opaque: dict[int, frozenset[int]] = {}
        # Markers put into the results of ops that took a value the analysis does not know (an unknown call's
        # result, an attribute set where it does not look): it may be a tensor with any history, so a graph holding
        # one may reach any parameter.  ``unknown_backward``: a backward ran from a value not known at all.
        self.opaque_markers: set[int] = set()
        # Constructs open around the running statement that it may not run in, or may leave part-way (an `if`
        # whose test is not known and what follows one that may jump out, a loop's iteration, a `try`), each a
        # fresh token, outermost first; the context each save was made in; and per save, the write that first
        # made it stale, when that write runs wherever the save did (see ``_staled_first``).
        self.unsure_context: tuple[object, ...] = ()
        self.save_context: dict[int, tuple[object, ...]] = {}
        self.first_stale: dict[int, Mutation] = {}
        self.opaque_at: dict[int, int] = {}
        # Syntax nodes the run made (a call with a caller's ``**kwargs`` written out), kept as long as the run: the
        # memos keyed by a node's ``id`` (``opaque_at``, ``noop_conversions``...) must never see its id reused.
        self.made_nodes: list[ast.AST] = []
        self.unknown_backward = False
        # Inside a call of a compiled module: per call, the tensors its forward keeps on objects (dynamo makes them
        # outputs of the graph it compiles, with their backward).
        self.compiled_outputs: list[list[Tensor]] = []
        self.grad_off_read: dict[int, ast.AST] = {}
        # What turned grad mode off last (a `with`, a call, a decorator), and for a decorator the frame of the
        # calls its function makes (in a followed call made with grad mode off, see also ``caller_grad_off``).
        self.grad_off_site: tuple[ast.AST, int | None] | None = None
        self.grad_off_backwards: list[GradOffBackward] = []
        self.numpy_refused: list[NumpyRefused] = []  # NumPy converting a tensor that requires grad: torch raises
        self.unreturned: list[UnreturnedLoss] = []  # a trainer's loss hook that returns nothing (loss_hooks.py)
        self.rebind_markers: set[int] = set()  # their markers, dropped when `requires_grad_()` makes a new leaf
        self.read_storages: set[int] = set()  # storages an op has read (their values are in some graph)
        # storage of a leaf whose values a forward replaced from themselves (``_own_values_hidden``) -> the expressions
        # that gave an op those values since (the op itself where its code does not show it: a layer's own weight)
        self.own_value_reads: dict[int, list[ast.AST]] = {}
        self.is_forward = False  # an nn.Module's forward: its return value is what backward runs through
        self.grad_mode_known = True  # the module's top level runs with grad mode on
        self.loop_vars: list[str] = []  # names bound by enclosing `for i in range(...)` loops
        # Calls into the file's own functions are analysed in place ("inlined"), with these set:
        self.call_stack: list[FollowedCall] = []  # the followed calls running now, outermost first
        self.root_fn: ast.AST | None = None  # the function the run is of (None: the module's top level)
        # Conversions to the dtype a tensor has already (`x.float()` of a float32 `x`), which return it: call node id
        # -> that dtype; the names such a call's statement bound (function, name) -> (statement, tensor, dtype); and
        # the followed calls whose every return hands back such a binding (call node id -> the same triple).
        self.noop_conversions: dict[int, str] = {}
        self.conversion_bindings: dict[tuple[int | None, str], tuple[ast.stmt, Tensor, str]] = {}
        self.converted_returns: dict[int, tuple[ast.stmt, Tensor, str]] = {}
        self.inline_record = True  # False while inlining a module's forward (its own analysis reports its writes)
        self.frame_sites: tuple[ast.AST, ...] = ()  # the call sites of ``call_stack``, outermost first
        self.caller_envs: list[dict[str, Value]] = []  # the variables of the function that made each of those calls
        # Saves an update of parameters (a step) made stale, and the ops that then took a value built on them.
        self.stale: frozenset[int] = frozenset()
        self.stale_uses: list[StaleUse] = []
        self.detaches: list[Detach] = []  # `.detach()`/`.detach_()` of tensors with a graph
        # Tensors with a graph assigned to an object's attribute (by id: the assignment, and the tensor kept alive),
        # and their reads after an update made a save of their graph stale.
        self.kept: dict[int, tuple[ast.stmt, Tensor]] = {}
        self.kept_stores: list[tuple[ast.stmt, int]] = []  # (the assignment, the sequence number it ran at)
        self.kept_reads: list[KeptRead] = []
        self.returns: list[Value] | None = None
        self.returned_conversions: list[tuple[ast.stmt, Tensor, str] | None] = []  # each return's conversion_made
        # Names not bound locally are looked up here, innermost first: a closure's defining scope, then the
        # module's variables (the live top-level environment when the call was made from the top level).
        self.scopes: list[dict[str, Value]] = []
        # `nonlocal`/`global` names of the running function, bound outside: name -> whether `nonlocal`
        self.outer_names: dict[str, bool] = {}
        self.outer_writes = OuterWrites()  # their writes on paths that may not run, joined where the paths meet
        self.owner: ClassInfo | None = ctx.class_of(self_value)  # the class whose method runs (for super())
        self.module_unit = False  # running the module's top level (its environment is the globals)
        self.presets: dict[int, Value] = {}  # ids of keyword value nodes spread from a caller, and their values
        # (a forwarding lambda's call, its body's call) while the callable it forwards to runs at that call
        self.saves_at: tuple[ast.AST, ast.Call] | None = None
        self.container_reads: set[int] = set()  # ids of the index nodes of list/dict element reads
        # `x[0]`, `x[2]` of a forward's argument taken to be one tensor (``Tensor.assumed``): each constant index's
        # element, by (the argument's storage id, the index).
        self.assumed_elements: dict[tuple[int, int], Tensor] = {}
        self.followed: set[tuple[str, str]] = set()  # (class, name) of the file's functions whose calls were followed
        # A function assigned to a class's attribute on a path known to run (``cls.forward = forward``, a monkey
        # patch): by (id of the ClassInfo, the attribute).  Instances look it up before the class's own method.
        self.patched_methods: dict[tuple[int, str], FunctionValue | None] = {}
        self.steps = 0  # statements run, expressions evaluated and calls followed, against MAX_STEPS
        # Calls into the project's other modules are followed (see ``project.py``): set by the engine for the units
        # that train (``Context.training_units``); elsewhere they stay unknown, which keeps a library's analysis
        # close to linear in its own size.
        self.follows_modules = False
        self.run_log = RunLog()  # the statements run, in order: what the fixes ask about reads after a write
        # Storages a loop over layers one of which stands for every layer (``ModuleValue.each``) hands on to the
        # layers after the one it ran
        self.unrun_layers_read: set[int] = set()

    # ----------------------------------------------------------------- helpers
    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def qual(self, node: ast.expr) -> str | None:
        """The qualified name ``node`` spells under the running module's imports, kept on the node with those
        imports (a statement runs again at each loop iteration and followed call: about 2 % of the analysis)."""
        if not isinstance(node, ast.AST):
            return self._qual(node)
        return statements.syntax_fact(node, "_gradguard_qual", self._qual, node, given=self.ctx.imports)

    def _qual(self, node: ast.expr) -> str | None:
        q = qualified_name(node, self.ctx.imports)
        return normalize(q) if q else None

    def _save(self, tensor: Tensor, op: str, role: str, node: ast.AST, certain: bool,
              operand: ast.expr | None = None) -> Save:
        if self.saves_at is not None and node is self.saves_at[0]:
            node = self.saves_at[1]  # a forwarding lambda's callable, run at its call, saves on the lambda's line
        save = Save(tensor.storage, tensor.storage.version, op, role, node, certain, path=self.frame_sites,
                    of_view=tensor.base is not None, operand=operand)
        self.saves.add(save)
        self.save_context[save.id] = self.unsure_context
        return save

    def _sink(self, kind: str, node: ast.AST, value: Value) -> frozenset[int]:
        """``value`` goes where the analysis cannot follow it (``kind``: "escape", "return", ...); its graph."""
        if kind == "escape":
            self.run_log.escape(value, node)
        elif kind == "return":
            self.run_log.value_taken([value], node)
        graph = graph_of(value)
        if graph:
            self.sinks.append(Sink(kind, node, graph, self._next()))
        return graph

    def _view(self, base: Tensor, node: ast.AST | None = None, multi_view: str | None = None) -> Tensor:
        return view_of(base, node, multi_view=multi_view, nograd=not self.state.grad_enabled)

    def _grad(self, *values: Value) -> Grad:
        if not self.state.grad_enabled:
            return Grad.NO
        return max((v.requires_grad for v in values if isinstance(v, (Tensor, Derived))), default=Grad.NO)

    # -------------------------------------------------------------- statements
    def run_module(self, body: list[ast.stmt]) -> None:
        """The module's top level: its variables are what the functions it calls see as globals."""
        self.module_unit = True
        self.run_block(body)

    def run_function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, is_forward: bool,
                     owner: ClassInfo | None = None, trains: bool | None = None) -> None:
        """``trains``: the function runs a backward or steps itself (the caller may know it from the text)."""
        self.is_forward = is_forward
        self.root_fn = fn
        if owner is not None:
            self.owner = owner
        if trains is None:
            trains = any(isinstance(n, ast.Attribute) and n.attr in ("backward", "step", "grad") for n in ast.walk(fn))
        # Grad mode at entry is the caller's: known on (for the rules that raise at once) only in a forward,
        # or in training code that runs backward or steps itself.
        self.grad_mode_known = is_forward or trains
        for deco in fn.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            if self.qual(target) in GRAD_OFF_CONTEXTS:
                self.state.grad_enabled = False
        args = fn.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        for i, arg in enumerate(params):
            if i == 0 and self.self_value is not None and arg.arg in ("self", "cls"):
                self.state.env[arg.arg] = self.self_value
                continue
            value = self._param_value(arg, is_forward)
            if isinstance(value, Tensor) and value.assumed and arg.arg in self.sequences_of(fn):
                value = UNKNOWN  # `for i, el in enumerate(x)`, `torch.cat(x)`: x is a list, not one tensor
            self.state.env[arg.arg] = value
        for extra in (args.vararg, args.kwarg):
            if extra is not None:
                self.state.env[extra.arg] = UNKNOWN
        passed = [a.arg for i, a in enumerate(params)
                  if not (i == 0 and self.self_value is not None and a.arg in ("self", "cls"))]
        self.run_log.parameters_bound(self.state.env, passed)
        self.run_block(fn.body)

    def _param_value(self, arg: ast.arg, is_forward: bool) -> Value:
        ann = arg.annotation
        if ann is not None and self._is_tensor_annotation(ann):
            # A helper's tensor argument: whether it requires grad is the caller's business.  Precision first:
            # assume not (calls from this file are followed with the caller's real values instead).
            rg = Grad.MAYBE if is_forward else Grad.NO
            return Tensor(Storage(), rg, leaf=False, origin=arg, label=f"`{arg.arg}`",
                          graph=frozenset({new_id()}) if rg else frozenset())
        if ann is not None and isinstance(ann, ast.Name) and ann.id in ("int", "float", "str", "bool"):
            return NOT_TENSOR
        if ann is not None and (self.qual(ann) or "").startswith("torch.nn.") and (self.qual(ann) or "").endswith("Module"):
            return ModuleValue("Module", torch_module=False, ctor=arg)  # model: nn.Module
        if is_forward and ann is None:
            return Tensor(Storage(), Grad.MAYBE, leaf=False, origin=arg, label=f"`{arg.arg}`", graph=frozenset({new_id()}),
                          assumed=True)
        return UNKNOWN

    def _is_tensor_annotation(self, ann: ast.expr) -> bool:
        if isinstance(ann, ast.Subscript):  # jaxtyping: Float[Tensor, "b d"]
            q = self.qual(ann.value) or ""
            if q.startswith("jaxtyping."):
                return True
            return isinstance(ann.slice, ast.Tuple) and any(self._is_tensor_annotation(e) for e in ann.slice.elts[:1])
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            return ann.value in ("Tensor", "torch.Tensor")
        q = self.qual(ann)
        return q in ("torch.Tensor", "torch.nn.Parameter") or (isinstance(ann, ast.Name) and ann.id == "Tensor")

    def sequences_of(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
        found = self.ctx.sequence_names.get(fn)
        if found is None:
            found = self.ctx.sequence_names[fn] = used_as_sequences(fn)
        return found

    def run_unsure(self, body: list[ast.stmt], unsure: bool = True) -> None:
        """``body`` run inside a construct it may not run in, or may leave part-way (when ``unsure``): a context of
        its own for the saves made in it (``_staled_first``), ended with it.  Plain save and restore, not a
        context manager: this runs for every branch and loop iteration."""
        outer = self.unsure_context
        if unsure:
            self.unsure_context = (*outer, object())
        try:
            self.run_block(body)
        finally:
            self.unsure_context = outer

    def _staled_first(self, mutation: Mutation, pending: list[Save]) -> dict[int, Mutation]:
        """For a write of saved tensors: per save an earlier write already made stale, that first write, when it
        runs wherever the save did (no construct it sits in that might skip it, or stop before it, is one the save
        is not in too).  Such a write is where torch's complaint starts: mending it (out of place) hands this one
        another tensor.  Each save this write is the first to make stale is remembered the same way."""
        earlier = {}
        for save in pending:
            if save.version < save.storage.version:
                first = self.first_stale.get(save.id)
                if first is not None:
                    earlier[save.id] = first
                continue
            made_in = self.save_context.get(save.id)
            if made_in is not None and made_in[:len(self.unsure_context)] == self.unsure_context:
                self.first_stale.setdefault(save.id, mutation)
        return earlier

    def run_block(self, body: list[ast.stmt]) -> None:
        if self.ctx.oracle is not None and not self.written_names:
            self.written_names = _names_written_in_place(body)
        log = self.run_log
        outer, log.block = log.block, body  # where an assignment's new value is read (``RunLog``)
        try:
            for stmt in body:
                if self.state.returned:
                    break
                self.run_stmt(stmt)
        finally:
            log.block = outer

    def count_step(self) -> None:
        """One more step of this analysis; past ``MAX_STEPS`` it stops (``TooManySteps``)."""
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise TooManySteps(f"its analysis takes more than {MAX_STEPS:,} steps (loops nested in loops, or "
                               "calls followed into calls)")

    def run_stmt(self, stmt: ast.stmt) -> None:
        if self.steps < self.step_limit:
            self.steps += 1  # ``count_step``, inline: once per statement
        else:
            self.count_step()
        self.run_log.ran(stmt)
        kind = type(stmt)
        try:
            function = _STMT_FUNCTIONS[kind]
        except KeyError:
            function = _STMT_FUNCTIONS[kind] = getattr(type(self), f"_stmt_{kind.__name__}", None)
        if function is not None:
            function(self, stmt)

    def _stmt_ClassDef(self, stmt: ast.ClassDef) -> None:
        """A class statement run inside a function whose bases include that function's names (a factory's
        ``class Net(nn.Module, mixin)``): the class with those bases, when each names a known class."""
        info = self.ctx.classes.get(stmt.name)
        if info is None or info.node is not stmt or not info.late_bases:
            return
        refs = [self.state.env.get(name) for name in info.late_bases]
        if all(isinstance(r, ClassRef) for r in refs):
            self.state.env[stmt.name] = ClassRef(bind(info, [r.info for r in refs]))

    def _stmt_Expr(self, stmt: ast.Expr) -> None:
        self.discarded_call = stmt.value  # a call whose result the statement drops (see `discarded_update`)
        self.eval(stmt.value)

    def discarded_update(self, tensor: Tensor, name: str, node: ast.AST, through_data: bool) -> None:
        """An out-of-place op with an in-place twin, on a gradient, a ``.data`` or a parameter under no_grad, as a
        statement of its own: it changes nothing (the twin was meant)."""
        if node is not self.discarded_call or name.endswith("_") or not self.k.is_inplace(name + "_"):
            return
        if not (tensor.is_grad or through_data or (tensor.param and not self.state.grad_enabled)):
            return
        what = f"`{ast.unparse(node.func.value)}`" if isinstance(node, ast.Call) and isinstance(
            node.func, ast.Attribute) else tensor.label
        self.discarded.append(DiscardedUpdate(node, name, name + "_", what, tensor.is_grad))

    def _stmt_Assign(self, stmt: ast.Assign) -> None:
        target, source = stmt.targets[0], stmt.value
        if (len(stmt.targets) == 1 and isinstance(target, (ast.Tuple, ast.List)) and isinstance(source, (ast.Tuple, ast.List))
                and len(target.elts) == len(source.elts)
                and not any(isinstance(e, ast.Starred) for e in (*target.elts, *source.elts))):
            # `loss, ret = 0, 1.0`: each name its own value (a display of plain numbers is no value of its own)
            values = [self.eval(e) for e in source.elts]
            for name, value in zip(target.elts, values):
                self.bind(name, value, stmt)
            return
        value = self.eval(stmt.value)
        for target in stmt.targets:
            self.bind(target, value, stmt)

    def _stmt_AnnAssign(self, stmt: ast.AnnAssign) -> None:
        if stmt.value is not None:
            self.bind(stmt.target, self.eval(stmt.value), stmt)

    def _stmt_AugAssign(self, stmt: ast.AugAssign) -> None:
        rhs = self.eval(stmt.value)
        symbol = _AUG_SYMBOL.get(type(stmt.op), "op=")
        op = BINARY_OPS.get(type(stmt.op))
        if isinstance(stmt.target, ast.Subscript):
            container = self.eval(stmt.target.value)
            if isinstance(container, (TensorSeq, TensorMap)):  # parts[0] += 1: the element itself is written
                element = self._element(container, stmt.target.slice)
                if isinstance(element, Tensor):
                    self._inplace(stmt, element, f"`{symbol}`", op, [rhs])
                elif isinstance(element, NumberFrom) and element.array_of is not None:
                    self._array_write(stmt, element, f"`{symbol}` on the NumPy array")
                elif isinstance(rhs, NumberFrom) and (isinstance(element, NumberFrom) or is_plain_data(element)):
                    _store(container, stmt.target.slice, _numbers([element, rhs], stmt))  # `totals["pg"] -= x.item()`
                elif op is not None and isinstance(rhs, Tensor) and is_plain_data(element):
                    # `losses[k] += loss` on a list of numbers: the element becomes a tensor holding rhs's graph;
                    # where the index is not known, any element may have, and none is known any more.
                    total = Tensor(Storage(), rhs.requires_grad, leaf=False, graph=rhs.graph, origin=stmt,
                                   label=rhs.label, dead_terms=self.dead_terms([rhs]))
                    if not _store(container, stmt.target.slice, total):
                        _forget_items(container)
            elif isinstance(container, Tensor):
                target, advanced = self._index_target(container, stmt.target.slice)
                self._inplace(stmt, target, f"`{symbol}` on an indexed element", op, [rhs], advanced=advanced,
                              index=stmt.target.slice)
            elif isinstance(container, NumberFrom) and container.array_of is not None:
                self._array_write(stmt, container, f"`{symbol}` on an element of the NumPy array")
            return
        current = self.eval(stmt.target)
        if (isinstance(current, TensorSeq) and isinstance(stmt.op, ast.Add) and isinstance(rhs, TensorSeq)
                and current.base is None and rhs.base is None):
            current.items.extend(rhs.items)  # `layers += [...]` extends the list in place (its aliases see it)
            current.literal = current.uniform = False
            current.counted = None
        elif isinstance(current, Tensor):
            self._inplace(stmt, current, f"`{symbol}`", op, [rhs])
        elif isinstance(current, DataAlias):
            self._data_write(stmt, current, f"`.data {symbol}`", [rhs])
        elif isinstance(current, NumberFrom) and current.array_of is not None:
            self._array_write(stmt, current, f"`{symbol}` on the NumPy array")
        elif isinstance(rhs, NumberFrom) and (isinstance(current, NumberFrom) or is_plain_data(current)):
            # `total -= log_probs[i].item() * reward`: a number built from values read out of tensors
            self.bind(stmt.target, _numbers([current, rhs], stmt), stmt)
        elif isinstance(current, Const) and type(current.value) is bool and type(stmt.op) in _LOGICAL_OPS:
            # `self.training |= self.export`: a flag combined with another, known when both are
            known = truth(rhs) if isinstance(rhs, Const) and type(rhs.value) is bool else None
            self.bind(stmt.target, UNKNOWN if known is None else Const(_LOGICAL_OPS[type(stmt.op)](current.value, known)),
                      stmt)
        else:
            if op is not None and isinstance(rhs, Tensor) and isinstance(current, PLAIN):
                # `total += loss`: an int/float accumulator becomes a tensor holding rhs's graph.
                self.bind(stmt.target, Tensor(Storage(), rhs.requires_grad, leaf=False, graph=rhs.graph,
                                              origin=stmt, label=rhs.label, dead_terms=self.dead_terms([rhs])), stmt)

    def _stmt_Return(self, stmt: ast.Return) -> None:
        value = self.eval(stmt.value) if stmt.value is not None else NOT_TENSOR
        if isinstance(value, DataAlias) and not value.tensor.leaf:
            # `return out.data` of an activation: the caller gets a tensor without the graph (a parameter's
            # `.data` stays an alias, which callers write through).
            value = self.read_data(value, stmt.value)
        elif isinstance(stmt.value, ast.Tuple) and isinstance(value, TensorSeq) and value.base is None \
                and any(isinstance(i, DataAlias) and not i.tensor.leaf for i in value.items):
            # `return ids, logits.data`: each returned `.data` of an activation likewise
            value = TensorSeq([self.read_data(i, stmt.value) if isinstance(i, DataAlias) and not i.tensor.leaf
                               else i for i in value.items], literal=value.literal)
        if isinstance(value, NumberFrom) and value.origin is stmt.value:
            # `return t.detach().numpy()`: a helper that converts; its callers decide what becomes of the numbers
            for cut in self.breaks:
                if cut.marker in value.markers:
                    cut.handed_back = True
        if self.returns is not None:  # inlined call: the value goes back to the caller
            self.returns.append(value)
            self.returned_conversions.append(self.conversion_made(stmt, value))
        elif stmt.value is not None:
            self._sink("return", stmt, value)
        self.state.returned = True

    def _settle(self, live: dict[str, Value], merged: State) -> None:
        """Continue with ``merged`` in the frame's own variables dict, which closures defined earlier hold."""
        if merged.env is not live:
            live.clear()
            live.update(merged.env)
        self.state = State(live, merged.grad_enabled, merged.returned, merged.aliases)

    def _stmt_If(self, stmt: ast.If) -> None:
        known = truth(self.eval(stmt.test))
        if known is None:
            known = self._flag_guard(stmt)
        if known is not None:  # `if self.detach:` with the flag known (a default, an attribute, a constant)
            self.run_block(stmt.body if known else stmt.orelse)
            if stmt.orelse if known else stmt.body:
                self.run_log.ran(Skipped(tuple(stmt.orelse if known else stmt.body)))
            return
        live = self.state.env
        before = self.state.copy()
        saves_before = self.saves.last_id
        outer = self.outer_writes.begin()
        narrowed = self._tensor_check(stmt.test)
        if narrowed is not None and not narrowed[1]:
            self.state.env[narrowed[0]] = NOT_TENSOR
        self.unsure_branches += 1
        self.run_unsure(stmt.body)
        self.unsure_branches -= 1
        after_body = self.state
        # The else branch does not run after the body: it must not see the body's saves, nor its outer names' writes.
        body_saves = self.saves.take_after(saves_before)
        body_outer = self.outer_writes.take(outer, live)
        self.state = before
        if narrowed is not None and narrowed[1]:
            self.state.env[narrowed[0]] = NOT_TENSOR
        self.unsure_branches += 1
        self.run_unsure(stmt.orelse)
        self.unsure_branches -= 1
        self.saves.put_back(body_saves)
        self.outer_writes.end([body_outer, self.outer_writes.take(outer, live)])
        self._settle(live, merge_states(after_body, self.state))
        if statements.syntax_fact(stmt, "_gradguard_leaves", _branches_may_leave, stmt):
            # the rest of this frame may not run after a save before it
            self.unsure_context = (*self.unsure_context, object())

    def _flag_guard(self, stmt: ast.If) -> bool | None:
        """``if p.requires_grad:`` (or ``not``) around a write of that same flag (``p.requires_grad = flag``,
        ``p.requires_grad_(flag)``): known when every tensor ``p`` stands for has a flag known on every path (a
        parameter never written, or written on paths known to run).  Run with ``flag`` true on tensors frozen that
        way, the write that was to unfreeze them never runs: a ``GuardedUnfreeze``."""
        test = stmt.test
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        read = test.operand if negated else test
        if not (isinstance(read, ast.Attribute) and read.attr == "requires_grad" and isinstance(read.value, ast.Name)):
            return None
        write = next((w for w in map(_flag_written, stmt.body) if w is not None and w[0] == read.value.id), None)
        owner = self.state.env.get(read.value.id)
        if write is None or not isinstance(owner, Tensor):
            return None
        tensors = owner.group or (owner,)
        if not all(t.param for t in tensors) or any(id(t) in self.unsure_flags for t in tensors):
            return None
        flags = {t.requires_grad for t in tensors}
        if flags not in ({Grad.YES}, {Grad.NO}):
            return None
        on = flags == {Grad.YES}
        frozen = [self.flag_writes.get(id(t)) for t in tensors]
        if not on and not all(frozen):
            return None  # frozen where we did not see it (a layer's weights made after a module-wide freeze)
        if not on and not negated and truth(self.eval(write[1])) is True:
            # Where they were frozen, as the function that calls this setter sees it: the write, or the call there
            # that led to it.
            level = len(self.frame_sites) - 1
            node, sites = frozen[0]
            if level >= 0 and tuple(sites[:level]) == tuple(self.frame_sites[:level]) and len(sites) > level:
                node = sites[level]
            own = all(any(f[0] is w or getattr(w, "value", None) is f[0] for w in stmt.body) for f in frozen)
            self.guarded_unfreezes.append(GuardedUnfreeze(stmt, node, ast.unparse(write[1]),
                                                          self.frame_sites[-1] if self.frame_sites else None,
                                                          self._next(), own))
        return on != negated

    def set_flag(self, tensor: Tensor, flag: bool, node: ast.AST, known: bool = True) -> None:
        """``requires_grad`` set on ``tensor`` (on each parameter it stands for), remembered with where (``known``:
        the value written is known)."""
        for t in tensor.group or (tensor,):
            t.requires_grad = Grad.YES if flag else Grad.NO
            if self.unsure_branches or not known:
                self.unsure_flags.add(id(t))
            else:
                self.flag_writes[id(t)] = (node, tuple(self.frame_sites))

    def _tensor_check(self, test: ast.expr) -> tuple[str, bool] | None:
        """``isinstance(b, torch.Tensor)`` (or its ``not``) on a local name: (the name, whether the body runs with
        it a tensor).  The other branch runs with it not a tensor: ``if not isinstance(b, torch.Tensor): b =
        torch.tensor(b)`` rebuilds a number, not a tensor's values."""
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        call = test.operand if negated else test
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "isinstance"
                and len(call.args) == 2 and isinstance(call.args[0], ast.Name)):
            return None
        kinds = call.args[1].elts if isinstance(call.args[1], ast.Tuple) else [call.args[1]]
        if len(kinds) != 1 or self.qual(kinds[0]) not in ("torch.Tensor", "torch.nn.Parameter"):
            return None
        name = call.args[0].id
        if not isinstance(self.state.env.get(name), (Tensor, Opaque)):
            return None
        return name, not negated

    def _stmt_For(self, stmt: ast.For) -> None:
        iterable = self.eval(stmt.iter)
        target = stmt.target
        if (isinstance(stmt.iter, ast.Call) and self.qual(stmt.iter.func) == "builtins.enumerate"
                and len(stmt.iter.args) == 1 and isinstance(target, ast.Tuple) and len(target.elts) == 2):
            # `for i, layer in enumerate(self.layers)`: the layers in turn, as below, with an index beside them.
            layers = self.eval(stmt.iter.args[0])
            if isinstance(layers, ModuleValue) and 0 < len(layers.children) <= _UNROLLED_LAYERS:
                iterable, target = layers, target.elts[1]
                self.bind(stmt.target.elts[0], NOT_TENSOR, stmt)
        submodules = _submodules(iterable) if isinstance(iterable, ModuleIterable) else None
        if submodules is not None and 0 < len(submodules) <= _UNROLLED_LAYERS:
            # `for m in self.modules(): if isinstance(m, nn.ReLU): m.inplace = True`: each module we built, in turn
            # `named_children()`: each with the name torch gives it, when known (`setattr(model, name, ...)`)
            named = {id(m): k for k, m in (named_submodules(iterable.owner, iterable.recursive, self._is_nn_module)
                                           or {}).items()} if iterable.named else {}
            for module in submodules:
                name = Const(named[id(module)]) if id(module) in named else NOT_TENSOR
                self.bind(target, TensorSeq([name, module]) if iterable.named else module, stmt)
                self.run_block(stmt.body)
            self.run_log.ran(Repeats(stmt))  # as many layers as built here; another caller's model may have more
            self.run_block(stmt.orelse)
            return
        if isinstance(iterable, Const) and isinstance(iterable.value, tuple) and 0 < len(iterable.value) <= \
                _UNROLLED_LAYERS and isinstance(target, ast.Name) and not _jumps_out(stmt.body):
            # `for name in ["0", "2"]: modules[name].register_forward_hook(...)`: each name in turn
            for value in iterable.value:
                self.bind(target, Const(value), stmt)
                self.run_block(stmt.body)
            self.run_log.ran(Repeats(stmt))
            self.run_block(stmt.orelse)
            return
        modules = literal_modules(iterable, _UNROLLED_LAYERS)
        if modules and not _jumps_out(stmt.body):
            # `for name, child in model._modules.items()`, `for m in [enc, dec]`: each module in turn
            for module in modules:
                self.bind(target, module, stmt)
                self.run_block(stmt.body)
            self.run_log.ran(Repeats(stmt))
            self.run_block(stmt.orelse)
            return
        if isinstance(iterable, ModuleValue) and 0 < len(iterable.children) <= _UNROLLED_LAYERS:
            # `for layer in self.layers: x = layer(x)`: each layer in turn, as a Sequential runs them.  A child standing
            # for every layer runs once: what the names the next iteration reads hold then, the later layers (never
            # run) read and may save again (``Mutation.unrun_layers``).
            for child in iterable.children:
                self.bind(target, child, stmt)
                self.run_block(stmt.body)
            if iterable.each:
                self.unrun_layers_read.update(sid for name in carried_names(stmt)
                                              for sid in storages_in(self.state.env.get(name)))
            self.run_log.ran(Repeats(stmt))  # as many layers as built here; another caller's model may have more
            self.run_block(stmt.orelse)
            return
        if self.range_count(stmt.iter) == 0:  # `for k in range(1, steps)` with `steps` known to be 1
            self.run_block(stmt.orelse)
            return
        target = stmt.target
        if isinstance(iterable, ParamIterable) and isinstance(target, ast.Name) and any(
                (w := _flag_written(b)) is not None and w[0] == target.id
                for b in (*stmt.body, *(b for i in stmt.body if isinstance(i, ast.If) for b in i.body))):
            # `for p in model.parameters(): p.requires_grad = flag`: every parameter, weights not read yet too
            self.materialize_params([iterable], stmt.iter)
        element = self._iter_element(iterable, stmt.iter)
        live = self.state.env
        before = self.state.copy()
        index_loop = isinstance(stmt.target, ast.Name) and isinstance(stmt.iter, ast.Call) and \
            self.qual(stmt.iter.func) == "builtins.range"
        if index_loop:
            self.loop_vars.append(stmt.target.id)
        # Twice: values saved in iteration i-1 meet the writes of iteration i (once when it runs once).
        once = _runs_once(stmt.iter) or (
            isinstance(iterable, TensorSeq) and (iterable.literal or iterable.counted is not None)
            and len(iterable.items) == 1)  # (a list of exactly one item, written out or counted as it grew)
        nested = _loops_inside(stmt)

        whole = once and not _jumps_out(stmt.body)  # `for _ in range(1)`: the body runs, and runs whole

        def iteration() -> None:
            outer = self.unsure_context
            if not whole:
                self.unsure_context = (*outer, object())
            try:
                self.bind(stmt.target, element, stmt)
                self.run_block(stmt.body)
            finally:
                self.unsure_context = outer

        outer = self.outer_writes.begin()
        self._iterate(iteration, 1 if once or nested >= DOUBLED_LOOP_LEVELS else 2, nested)
        ran = self.outer_writes.take(outer, live)
        if not once:
            self.run_log.ran(Repeats(stmt))
        if index_loop:
            self.loop_vars.pop()
        if _runs_once(stmt.iter) and not _jumps_out(stmt.body):
            self.outer_writes.end([ran])
            self._settle(live, self.state)  # `for _ in range(1)`: the body ran, and ran whole
        else:
            self.outer_writes.end([{}, ran], after_loop=True)
            self._settle(live, merge_states(before, self.state, after_loop=True))
        self.run_block(stmt.orelse)

    _stmt_AsyncFor = _stmt_For

    def range_count(self, node: ast.expr) -> int | None:
        """How many numbers ``range(...)`` yields when its bounds are ints known here (a literal, or a constant a
        caller passed: ``range(1, self.steps)`` of an instance built with ``steps=1``); None otherwise.  The bounds
        are read again, so only names, attributes, literals and arithmetic on them."""
        if not (isinstance(node, ast.Call) and self.qual(node.func) == "builtins.range" and 1 <= len(node.args) <= 3
                and not node.keywords and all(_pure(a) for a in node.args)):
            return None
        bounds = [self._known_int(a) for a in node.args]
        if None in bounds or (len(bounds) == 3 and bounds[2] == 0):
            return None
        return len(range(*bounds))

    def _known_int(self, node: ast.expr) -> int | None:
        """The int a pure expression computes when every name in it holds a known int (``steps + 1``).  Carried
        out here only: elsewhere arithmetic gives some int (a counter changes from one iteration to the next)."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, tuple(_INT_OPS)):
            left, right = self._known_int(node.left), self._known_int(node.right)
            if left is None or right is None or (isinstance(node.op, ast.FloorDiv) and right == 0):
                return None
            return _INT_OPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self._known_int(node.operand)
            return None if inner is None else -inner
        return int_const(self.eval(node))

    def _iterate(self, iteration, runs: int, nested: int) -> None:
        """Run a loop's body ``runs`` times; an innermost loop whose second iteration made an op save what it did
        not in the first runs a third: a value it carries began to require grad (a recurrent state that starts as
        zeros), and only from the third iteration on does each one meet the saves its predecessor made with it."""
        kinds = []
        for _ in range(runs):
            iteration()
            kinds.append(self.saves.kinds)
        if runs == 2 and nested == 0 and kinds[1] > kinds[0]:
            iteration()

    def _stmt_While(self, stmt: ast.While) -> None:
        live = self.state.env
        before = self.state.copy()
        nested = _loops_inside(stmt)

        def iteration() -> None:
            outer = self.unsure_context
            self.unsure_context = (*outer, object())
            try:
                self.eval(stmt.test)
                self.run_block(stmt.body)
            finally:
                self.unsure_context = outer

        outer = self.outer_writes.begin()
        self._iterate(iteration, 1 if nested >= DOUBLED_LOOP_LEVELS else 2, nested)
        self.run_log.ran(Repeats(stmt))
        self.outer_writes.end([{}, self.outer_writes.take(outer, live)], after_loop=True)
        self._settle(live, merge_states(before, self.state, after_loop=True))
        self.run_block(stmt.orelse)

    def _stmt_With(self, stmt: ast.With) -> None:
        saved_mode, saved_site = self.state.grad_enabled, self.grad_off_site
        leaving = []  # the rest of each `@contextmanager` generator entered, run after the body, innermost first
        for item in stmt.items:
            expr = item.context_expr
            if isinstance(expr, ast.Call):
                q = self.qual(expr.func)
                if q in GRAD_OFF_CONTEXTS:
                    self.state.grad_enabled, self.grad_off_site = False, (expr, None)
                elif q in GRAD_ON_CONTEXTS:
                    self.state.grad_enabled = True
                elif q in SET_GRAD and expr.args:
                    flag = expr.args[0]
                    if isinstance(flag, ast.Constant) and isinstance(flag.value, bool):
                        self.state.grad_enabled = flag.value
                        if not flag.value:
                            self.grad_off_site = (expr, None)
                    else:
                        self.eval(flag)
                else:
                    entered = self.enter_context(expr, stmt)
                    if entered is None:
                        self.eval(expr)
                    else:
                        value, leave = entered
                        leaving.append(leave)
                        if item.optional_vars is not None:
                            self.bind(item.optional_vars, value, stmt)
                        continue
            else:
                self.eval(expr)
            if item.optional_vars is not None:
                self.bind(item.optional_vars, UNKNOWN, stmt)
        inference = any(isinstance(item.context_expr, ast.Call)
                        and self.qual(item.context_expr.func) == "torch.inference_mode"
                        and not item.context_expr.args and not item.context_expr.keywords for item in stmt.items)
        if inference:
            self.inference_blocks.append(len(self.frame_sites))
        try:
            self.run_block(stmt.body)
        finally:
            if inference:
                self.inference_blocks.pop()
        self.state.grad_enabled, self.grad_off_site = saved_mode, saved_site
        for leave in reversed(leaving):
            leave()

    def made_in_inference_mode(self, tensor: Tensor, node: ast.AST) -> Tensor:
        """A tensor a factory makes inside a ``torch.inference_mode()`` block is an inference tensor: torch refuses
        an in-place update of it outside inference mode.  It remembers the statement of the block's own function
        that made it (the factory, or the call it runs in)."""
        if self.inference_blocks:
            depth = self.inference_blocks[-1]
            tensor.inference_made = self.frame_sites[depth] if depth < len(self.frame_sites) else node
        return tensor

    _stmt_AsyncWith = _stmt_With

    def _stmt_Try(self, stmt: ast.Try) -> None:
        """Body, handlers, else and finally in turn (a handler runs when the body raised before its end, so a
        return in the body does not stop the handlers); the path has returned when every way through did."""
        self.run_unsure(stmt.body, bool(stmt.handlers))  # (without a handler, a raise leaves what follows too)
        returned = self.state.returned
        if not returned:
            self.run_block(stmt.orelse)
            returned = self.state.returned
        for handler in stmt.handlers:
            self.state.returned = False
            self.run_unsure(handler.body)
            returned = returned and self.state.returned
        self.state.returned = False
        self.run_block(stmt.finalbody)
        self.state.returned = returned or self.state.returned

    _stmt_TryStar = _stmt_Try

    def _stmt_Match(self, stmt: ast.Match) -> None:
        self.eval(stmt.subject)
        live = self.state.env
        before = self.state.copy()
        merged = None
        outer, paths = self.outer_writes.begin(), [{}]
        for case in stmt.cases:
            self.state = before.copy()
            self.run_block(case.body)
            paths.append(self.outer_writes.take(outer, live))
            merged = self.state if merged is None else merge_states(merged, self.state)
        self.outer_writes.end(paths)
        self._settle(live, merge_states(before, merged) if merged is not None else before)

    def _stmt_Delete(self, stmt: ast.Delete) -> None:
        for target in stmt.targets:
            if isinstance(target, ast.Name):
                self.state.env.pop(target.id, None)
            elif isinstance(target, ast.Subscript) and _pure(target.value):
                held = self.eval(target.value)
                if isinstance(held, TensorSeq):
                    held.counted = None  # `del feats[0]`: its items no longer known one by one

    # --------------------------------------------------------------- binding
    def bind(self, target: ast.expr, value: Value, stmt: ast.stmt) -> None:
        if isinstance(target, ast.Attribute) and target.attr == "grad":
            self.grads_written = True
        if self.watched_outputs and isinstance(target, (ast.Attribute, ast.Subscript)):
            self.note_stored(value, stmt)  # `self.acts[name] = output` in a forward hook (see hooks.py)
        if not self.state.grad_enabled and isinstance(value, Tensor) and isinstance(target, (ast.Name, ast.Attribute)):
            value = self._rebound(target, value, stmt)
        if isinstance(target, ast.Name):
            if isinstance(value, (Derived, Opaque)) and target.id in self.written_names:
                value = self._ask_jedi(target, stmt, value)
            if isinstance(value, Tensor) and value.label == "tensor":
                value.label = f"`{target.id}`"
            if (isinstance(value, Tensor) and value.base is not None and self.state.grad_enabled
                    and isinstance(stmt, ast.Assign) and value.origin is stmt.value
                    and value.root().leaf and value.root().requires_grad == Grad.YES):
                value.bound_at = stmt  # `b = conv.bias.view(na, -1)`: a name for a view of a leaf
            if self.loads and isinstance(value, ModuleValue):
                held = self.state.env if target.id not in self.outer_names else next(
                    (sc for sc in self.scopes if target.id in sc), {})
                self.replaces_copy(held.get(target.id), value, stmt)
            if target.id in self.outer_names:
                # Not bound yet where it lives: a `nonlocal` name is the enclosing function's, a `global` the module's.
                unbound = self.scopes[0] if self.outer_names[target.id] and len(self.scopes) > 1 else \
                    self.scopes[-1] if self.scopes else None
                scope = next((sc for sc in self.scopes if target.id in sc), unbound)
                if scope is not None:
                    self.outer_writes.note(scope, target.id)
                    scope[target.id] = value
                    self._note_conversion(self._frame_of(scope), target.id, stmt, value)
                    return
            self._note_conversion(self.running_function(), target.id, stmt, value)
            other = self._held_by_another(target.id, value, stmt)
            if other is not None:
                self.state.aliases[target.id] = (stmt, other)  # `out = x`: a second name, not a copy
            else:
                self.state.aliases.pop(target.id, None)
            self.state.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            elements = self._unpack(value, len(target.elts), stmt)
            for elt, item in zip(target.elts, elements):
                if isinstance(elt, ast.Starred):
                    self.bind(elt.value, UNKNOWN, stmt)
                else:
                    self.bind(elt, item, stmt)
        elif isinstance(target, ast.Attribute):
            owner = self.eval(target.value)
            if isinstance(owner, ModuleValue):
                info = self.ctx.class_of(owner)
                setter = find_setter(self.ctx.classes_for(info), info, target.attr) if info is not None else None
                if setter is not None:  # `layer.state = h`: a property's setter runs
                    self._call_method(setter, owner, [value], {}, stmt)
                    return
                if target.attr == "requires_grad" and truth(value) is False:
                    self._module_flag(owner, target, stmt)
                self.store_module_attr(owner, target, value, stmt)
                if (target.attr == "inplace" and owner.torch_module and owner.cls in self.k.inplace_kwarg_modules
                        and not self.unsure_branches):
                    flag = truth(value)  # `m.inplace = True` on a layer already built, on a path known to run
                    if flag is not None:
                        owner.inplace, owner.made_inplace = flag, stmt if flag else None
            if isinstance(owner, FunctionContext):
                owner.attrs[target.attr] = value  # `ctx.scale = s`: read back in the Function's backward
                return
            if isinstance(owner, ClassRef) and isinstance(value, FunctionValue) and value.self_value is None \
                    and isinstance(value.node, ast.FunctionDef):
                if self.unsure_branches:  # patched on some paths only: which method runs is not known
                    self.patched_methods[(id(owner.info), target.attr)] = None
                else:
                    self.patched_methods[(id(owner.info), target.attr)] = value
                return
            if isinstance(owner, OptimizerValue) and target.attr == "param_groups":
                self.regrouped(owner, [value])
                return
            if isinstance(owner, DataAlias):
                # `p.data = new`: rebinds storage; the old storage (and any saved copy) is kept.
                owner.tensor.storage = Storage()
                return
            if isinstance(owner, Tensor) and target.attr == "data" and self._own_values_hidden(stmt, owner, value):
                return
            if isinstance(owner, Tensor) and target.attr == "requires_grad" and isinstance(value, PLAIN):
                flag = truth(value)
                if flag is not None:  # `for p in model.parameters(): p.requires_grad = False`: each of them
                    self.set_flag(owner, flag, stmt)
                return
            self._sink("escape", stmt, value)
        elif isinstance(target, ast.Subscript):
            container = self.eval(target.value)
            if isinstance(container, Tensor):
                self._part_kept(stmt, target, container, value)
                write_target, advanced = self._index_target(container, target.slice)
                self._inplace(stmt, write_target, "an indexed assignment `[...] =`", None, [value], advanced=advanced,
                              copy_from=value, index=target.slice, written_through=_through_of(target))
            elif isinstance(container, DataAlias):
                self._data_write(stmt, container, "an indexed assignment through `.data`", [value])
            elif isinstance(container, NumberFrom) and container.array_of is not None:
                self._array_write(stmt, container, "an indexed assignment to the NumPy array")
            elif isinstance(container, TensorSeq) and container.base is None:
                index = _const_int(target.slice)  # `hs[0] = h`: the list holds h from now on
                if index is not None and -len(container.items) <= index < len(container.items):
                    container.items[index] = value
                else:
                    container.items.append(value)
            elif isinstance(container, TensorMap):
                evaluated = self.eval(target.slice)
                key = _const_key(target.slice)
                if key is None and isinstance(evaluated, Const) and isinstance(evaluated.value, str):
                    key = evaluated.value  # `state[key] = v` with the key known
                if key is None:
                    container.exact = False
                container.items[key if key is not None else object()] = value
            elif isinstance(container, ParamGroups):
                self.eval(target.slice)
                key = _const_key(target.slice)
                if container.params or not isinstance(key, str) or key == "params":
                    self.regrouped(container.optimizer, [value])  # `group["params"] = [...]`, not `group["lr"]`
            else:
                self._sink("escape", stmt, value)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, UNKNOWN, stmt)

    def patched_method(self, info: ClassInfo | None, name: str) -> FunctionValue | None | bool:
        """The function a monkey patch put in place of method ``name`` of the class (or of the base it is found
        on first along the MRO); False when none did; None when one did on some paths only (not known)."""
        if not self.patched_methods or info is None:
            return False
        for cls in mro(self.ctx.classes_for(info), info):
            key = (id(cls), name)
            if key in self.patched_methods:
                return self.patched_methods[key]
            if own_method(cls.node, name) is not None:
                return False
        return False

    def store_module_attr(self, owner: ModuleValue, target: ast.Attribute, value: Value, stmt: ast.AST) -> None:
        """``owner.attr = value`` (written out, or by ``setattr`` with the name known): what it replaces, then the
        new value held."""
        self._replacing(owner, target, value, stmt)
        if self.loads and isinstance(value, ModuleValue):
            self.replaces_copy(owner.attrs.get(target.attr), value, stmt)
        owner.attrs[target.attr] = value
        if isinstance(value, Tensor) and value.graph and self.state.grad_enabled:
            self.kept[id(value)] = (stmt, value)
            if self.compiled_outputs and value.requires_grad == Grad.YES:
                self.compiled_outputs[-1].append(value)  # an output of the compiled graph too
            self.kept_stores.append((stmt, self.seq))

    def _module_flag(self, module: ModuleValue, target: ast.Attribute, stmt: ast.stmt) -> None:
        """``module.requires_grad = False`` on an ``nn.Module`` whose classes (torch's and the file's) have no
        ``requires_grad`` of their own: its parameters that require grad keep requiring it."""
        info = self.ctx.class_of(module)
        if not (module.torch_module or (info is not None and info.is_module)):
            return
        if info is not None and any(_names_requires_grad(c.node) for c in mro(self.ctx.classes_for(info), info)):
            return  # the class keeps a flag of that name itself
        self.flags.append(InertFlag(stmt, module, ast.unparse(target.value), self._next()))

    def replace_child(self, module: ModuleValue, index: int, value: ModuleValue, node: ast.AST) -> None:
        """Layer ``index`` of a ``Sequential`` or ``ModuleList`` replaced by ``value`` (``setattr(seq, "0", m)``)."""
        target = ast.copy_location(ast.Subscript(value=node.args[0], slice=ast.Constant(index), ctx=ast.Store()), node)
        self._replacing(module, target, value, node, old=module.children[index])
        children = list(module.children)
        children[index] = value
        module.children = children

    def _replacing(self, module: ModuleValue, target: ast.Attribute | ast.Subscript, value: Value, stmt: ast.AST,
                   old: Value | None = None) -> None:
        """A parameter or a module with parameters assigned over one that an optimizer already holds."""
        old = module.attrs.get(target.attr) if old is None else old
        if old is None or old is value or not self.optimizers:
            return
        if isinstance(value, Tensor) and isinstance(old, Tensor) and value.param and old.param:
            old_sources = old.graph
        elif isinstance(value, ModuleValue) and isinstance(old, ModuleValue):
            old_sources = self.parameter_sources(old)
        else:
            return
        holder = next((o for o in self.optimizers if o.held & old_sources), None)
        if holder is not None:
            site, depth = self._replacement_site(holder, stmt, old, value)
            # The optimizer built just before the call that leads to the replacement, in its block: the line to
            # change (build it after), as the probe places it (``probe/module_flags.py``); built just before the
            # replacement itself, the finding stays there, and its fix builds it after.
            envs = [*self.caller_envs, self.state.env]
            built = (built_just_before(self.root_fn if depth == 0 else self.call_stack[depth - 1].fn,
                                       _holding(envs[depth], holder), site, holder.made_in)
                     if depth is not None and not self.unsure_branches else None)
            self.replaced.append(ReplacedParameter(stmt, ast.unparse(target), value, holder, self._next(),
                                                   site=site, built=built))

    def replaces_copy(self, old: Value | None, new: ModuleValue, stmt: ast.stmt) -> None:
        """``old`` (what the name or attribute held) was loaded with ``new``'s weights and has not run since: storing
        ``new`` in its place, on a path known to run, drops the copy for the module it copies."""
        for load in self.loads:
            if load.target is old and load.source is new and not load.used and load.replaced is None \
                    and not self.unsure_branches:
                load.replaced, load.replaced_seq = stmt, self._next()

    def optimizer_built(self, optimizer: OptimizerValue, node: ast.AST) -> OptimizerValue:
        """A new optimizer takes the parameters its owners have now (a torch layer's weight is made here if
        nothing has read it yet)."""
        self.materialize_params(optimizer.owners, node)
        optimizer.held = frozenset().union(*(p.graph for p in self._param_tensors(optimizer.owners)))
        optimizer.made_in = self.run_log.sites.get(self.run_log.stack[-1])
        self.optimizers.append(optimizer)
        return optimizer

    def materialize_params(self, owners: list, node: ast.AST) -> None:
        """Make the weights of the torch layers among ``owners`` that nothing has read yet: what takes all of a
        module's parameters (an optimizer, a loop over ``parameters()``) takes those too."""
        stack, seen = list(owners), set()
        while stack:
            value = stack.pop()
            if isinstance(value, ParamIterable):  # `[*model.parameters()]`, `chain(a.parameters(), ...)`
                stack.extend(value.owner if isinstance(value.owner, list) else [value.owner])
                continue
            if id(value) in seen or not isinstance(value, ModuleValue):
                continue
            seen.add(id(value))
            layer = self.k.module(value.cls) if value.torch_module and not value.children else None
            if layer is not None and layer.has_params:
                self._module_attr(value, "weight", node)
            stack.extend(value.children)
            stack.extend(v for v in value.attrs.values() if isinstance(v, ModuleValue))

    def _replacement_site(self, optimizer: OptimizerValue, stmt: ast.stmt, old: Value,
                          new: Value) -> tuple[ast.AST, int | None]:
        """The line to change for a replacement of what ``optimizer`` holds: the assignment, when the new parameters
        may have the old ones' shapes (a parameter; a module built the same way: copy the values into the old
        ones) or when the optimizer is at hand there; else, in the innermost function of the call path whose
        variables hold the optimizer (or an instance there, as an attribute), the call that leads to the
        replacement (build the optimizer after it, or give the optimizer the new parameters there).  With it, the
        depth of the function it is in, when that one has the optimizer at hand (None: it does not)."""
        if not isinstance(new, ModuleValue) or not isinstance(old, ModuleValue) or (
                isinstance(old.ctor, ast.Call) and isinstance(new.ctor, ast.Call)
                and ast.dump(old.ctor) == ast.dump(new.ctor)):
            return stmt, None
        envs = [*self.caller_envs, self.state.env]
        for depth in range(len(envs) - 1, -1, -1):
            if any(v is optimizer or isinstance(v, ModuleValue) and any(a is optimizer for a in v.attrs.values())
                   for v in envs[depth].values()):
                return (self.frame_sites[depth], depth) if depth < len(self.frame_sites) else (stmt, depth)
        return stmt, None

    def regrouped(self, optimizer: OptimizerValue, written: list[Value]) -> None:
        """Parameters written into an optimizer's groups: from now on it may step them (and others than it took)."""
        optimizer.regrouped = self._next()
        found = self._param_tensors([v for w in written
                                     for v in (w.items.values() if isinstance(w, TensorMap) else (w,))])
        optimizer.regrouped_with = optimizer.regrouped_with.union(*(p.graph for p in found))

    def parameter_sources(self, module: ModuleValue) -> frozenset[int]:
        """The grad sources of a module's parameters that require grad, as far as the run has seen them (a torch
        layer's weights appear once something reads them, as its forward does)."""
        return frozenset().union(*(p.graph for p in self._param_tensors(module) if p.requires_grad != Grad.NO))

    def _rebound(self, target: ast.Name | ast.Attribute, value: Tensor, stmt: ast.stmt) -> Tensor:
        """``w = w - lr * w.grad`` under no_grad: the name leaves the leaf that requires grad (which an optimizer
        may hold) for a new tensor that does not.  A marker in the new tensor's graph shows whether a later
        backward runs through it (the engine then looks for the gradient read that finds nothing)."""
        if isinstance(target, ast.Name):
            old = self.state.env.get(target.id)
            old = self.lookup(target.id) if old is None else old
        else:
            owner = self.eval(target.value) if isinstance(target.value, ast.Name) else None
            old = owner.attrs.get(target.attr) if isinstance(owner, ModuleValue) else None
            if isinstance(owner, ModuleValue) and owner.torch_module and isinstance(old, Tensor) and old.param:
                return value  # torch refuses a plain tensor for a registered parameter (a TypeError at once)
        if value.graph & self.rebind_markers:
            return value  # rebound already where a followed call computed it: that write is the one to report
        if (isinstance(target, ast.Name) and isinstance(old, Tensor) and not old.leaf and old.requires_grad == Grad.YES
                and value.requires_grad == Grad.NO and old.graph and old.graph <= value.graph and self.grad_mode_known
                and not self.function_contexts):
            # `pred = ema(pred)` under no_grad: the name now holds a value computed from its old one without a
            # graph, a cut like `.detach()` (reported when a loss term is left with nothing but cut values).  In a
            # function called with grad mode off that leaves it so, the cut is the caller's: a name of the function's
            # own (`x = layer(x)` in a forward run under the caller's no_grad) hands it on to what the function
            # returns, which the caller's binding cuts; a `nonlocal` or `global` name is cut at the call made in the
            # function that turned grad mode off, where it is to be on.
            cut = getattr(stmt, "value", stmt)
            under = self.caller_grad_off
            if under is not None and self.grad_off_site is under[0]:
                if target.id not in self.outer_names:
                    return value
                cut = under[1]
            marker = new_id()
            switch = self.grad_off_site[0] if self.grad_off_site is not None and not self.inference_blocks else None
            if self.qual(switch.func if isinstance(switch, ast.Call) else switch) == "torch.inference_mode":
                switch = None
            self.breaks.append(GraphBreak(cut, "`torch.no_grad()`", old.graph, marker,
                                          origin=old.origin, certain=True, cut=True, switched_off=switch))
            self.cut_markers.add(marker)
            return replace(value, graph=frozenset({marker}), lost_sources=old.graph)
        if (not isinstance(old, Tensor) or old.storage is value.storage or not old.leaf or old.group
                or old.requires_grad != Grad.YES or value.requires_grad != Grad.NO or not old.graph):
            return value
        marker = new_id()
        self.rebinds.append(Rebind(stmt, f"`{ast.unparse(target)}`", old.graph, marker, self._next()))
        self.rebind_markers.add(marker)
        return replace(value, graph=frozenset({marker}), rebound_from=old.graph)  # grad off: no graph of its own

    def _ask_jedi(self, target: ast.Name, stmt: ast.stmt, value: Value) -> Value:
        """``w = make_weight()`` with ``make_weight`` from another module: jedi knows what it returns."""
        call = getattr(stmt, "value", None)
        if self.ctx.oracle is None or not isinstance(call, ast.Call):
            return value
        q = self.qual(call.func)
        if q is None or q.startswith(("torch.", "builtins.")):
            return value
        full_name = self.ctx.oracle.type_of_name(target.lineno, target.col_offset)
        if full_name in PARAMETER:
            return new_tensor(stmt, Grad.YES, leaf=True, param=True, label=f"`{target.id}`")
        if full_name in TENSOR:
            return Tensor(Storage(), Grad.MAYBE, leaf=False, graph=graph_of(value), origin=stmt, assumed=True)
        if full_name and full_name.startswith(MODULE_PREFIX):
            return ModuleValue(full_name.rsplit(".", 1)[1], torch_module=True, ctor=stmt)
        return value

    def _unpack(self, value: Value, count: int, node: ast.AST) -> list[Value]:
        if isinstance(value, TensorSeq):
            return [value.element(i) for i in range(count)]
        if isinstance(value, Tensor) and not value.assumed:
            # `a, b = t` iterates t: each element is an output of Unbind (a disjoint piece of it).
            split = new_id()
            pieces = [self._view(value, node, multi_view="Unbind" if value.requires_grad else None) for _ in range(count)]
            for i, piece in enumerate(pieces):
                piece.piece = (split, i)
            return pieces
        if isinstance(value, Derived):
            return [value] * count
        if isinstance(value, ParamIterable) and not value.named:
            # `w1, b1, w2, b2 = model.parameters()`: each one of the parameters (which one is not told)
            return [self._iter_element(value, node) for _ in range(count)]
        return [UNKNOWN] * count

    def _iter_element(self, iterable: Value, node: ast.expr) -> Value:
        if isinstance(iterable, TensorSeq):
            tensors = tuple(i for i in iterable.items if isinstance(i, Tensor))
            if iterable.base is None and len(tensors) > 1 and len(tensors) == len(iterable.items):
                # `for p in [w1, w2]`: one name stands for each element in turn; writes reach all of them.
                first = tensors[0]
                return Tensor(first.storage, max(t.requires_grad for t in tensors), leaf=all(t.leaf for t in tensors),
                              param=all(t.param for t in tensors), graph=frozenset().union(*(t.graph for t in tensors)),
                              origin=first.origin, label=first.label, group=tensors)
            return iterable.element(None)
        if isinstance(iterable, Tensor) and not iterable.assumed:
            return self._view(iterable, node, multi_view="Unbind" if iterable.requires_grad else None)
        if isinstance(iterable, (ParamIterable, ModuleIterable)):
            params = tuple(self._param_tensors(iterable.owner))
            graph = frozenset().union(*(p.graph for p in params)) if params else frozenset({new_id()})
            param = Tensor(Storage(), Grad.YES, leaf=True, param=True, label="a parameter", origin=node, group=params,
                           graph=graph)
            element = param
            if isinstance(iterable, ModuleIterable):
                # `m.weight` stands for the weights seen so far; `m.parameters()` reaches the owner's, also later.
                element = ModuleValue("a submodule", torch_module=False,
                                      attrs={"weight": param, "bias": param, "<owner>": iterable.owner})
            return TensorSeq([NOT_TENSOR, element]) if iterable.named else element
        if isinstance(iterable, Derived):
            return iterable
        if isinstance(iterable, ModuleValue) and iterable.children:
            first = iterable.children[0]  # `for layer in self.layers`: alike layers stand for each other
            return first if all(c.cls == first.cls for c in iterable.children) else UNKNOWN
        if isinstance(iterable, TensorMap):
            return NOT_TENSOR  # iterating a dict yields its keys
        if isinstance(iterable, ParamGroups) and not iterable.params:
            return iterable  # `for group in opt.param_groups`: each group
        return UNKNOWN

    # ---------------------------------------------------------- in-place writes
    def _index_target(self, container: Tensor, index: ast.expr) -> tuple[Tensor, bool]:
        """``t[i] = v`` writes through a view of ``t`` (basic index) or into ``t`` itself (advanced index)."""
        if self._is_advanced_index(index):
            return container, True
        return self._view(container, index), False

    def _is_element_loop_index(self, index: ast.expr) -> bool:
        return bool(self.loop_vars) and any(isinstance(n, ast.Name) and n.id in self.loop_vars for n in ast.walk(index))

    def _is_advanced_index(self, index: ast.expr) -> bool:
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        for part in parts:
            if isinstance(part, (ast.Slice, ast.Constant)) or _const_int(part) is not None:
                continue
            if isinstance(part, (ast.List, ast.Compare, ast.ListComp)):
                return True
            if isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Invert):
                return True  # `x[~mask]`: an inverted mask (`~` of an int index would be a negative one)
            value = self.eval(part)
            if isinstance(value, (Tensor, TensorSeq)):
                return True
        return False

    def _inplace(self, node: ast.AST, target: Tensor, how: str, twin: str | None, operands: list[Value], *,
                 advanced: bool = False, module: ModuleValue | None = None, functional_inplace: bool = False,
                 copy_from: Value | None = None, kind: str = "write", index: ast.expr | None = None,
                 out_inputs: list[Value] | None = None, by_layer: bool = False,
                 written_through: ast.expr | None = None, values: list[Value] | None = None) -> Tensor:
        """Record a write to ``target``'s storage, then update its abstract state as autograd would.

        ``out_inputs`` are the inputs of a call that writes ``target`` through ``out=``: the values written in
        are computed from them, but (out= being non-differentiable) no graph joins the target.  ``values``: what a
        write that joins no graph (``.data``) computes its values from, for ``Mutation.value_grad`` only."""
        written = target.group or (target,)
        storages = {t.storage.id for t in written}
        pending = _few_of_each(s for s in self.saves.on(storages) if not s.consumed and s.version <= s.storage.version)
        if self.inline_record:
            mutation = Mutation(node, snapshot(target), how, self.state.grad_enabled, self._next(), advanced,
                                module, functional_inplace, pending, kind=kind,
                                element_loop=index is not None and self._is_element_loop_index(index),
                                grad_mode_known=self.grad_mode_known,
                                value_grad=self._grad(*(values if values is not None else operands
                                                        if out_inputs is None else out_inputs)),
                                out_argument=out_inputs is not None,
                                read_before=bool(storages & self.read_storages))
            if self.call_stack:
                mutation.frames = [(call.site, call.mark) for call in self.call_stack]
            mutation.moment = self.run_log.moment(target, [*self.caller_envs, self.state.env], tuple(self.scopes), node)
            mutation.written_through = written_through or _written_through(node)
            mutation.by_layer = by_layer
            mutation.unrun_layers = not storages.isdisjoint(self.unrun_layers_read)
            mutation.in_function = bool(self.function_contexts)
            if mutation.in_function:
                unpacked = {s.id for c, _ in self.function_contexts if not c.packed for s in c.saves}
                mutation.before_packed = frozenset(s.id for s in pending if s.id in unpacked)
            mutation.alias_site = self._second_name(node, target, mutation.written_through)
            mutation.conversion_site = self._conversion_site(target, mutation.written_through)
            if not self.inference_blocks:
                mutation.inference_made = next((t.root().inference_made for t in written
                                                if t.root().inference_made is not None), None)
            through = mutation.written_through
            held = self.state.env.get(through.id) if isinstance(through, ast.Name) else None
            if isinstance(held, Tensor) and held.bound_at is not None and any(t is held for t in target.view_chain()):
                mutation.view_site = held.bound_at
            mutation.in_container = self._through_container(node)
            self._mark_hidden_write(mutation, target, kind)
            if kind == "write":
                mutation.staled_first = self._staled_first(mutation, pending)
            self.mutations.append(mutation)
            if pending and (kind == "step" or (not self.state.grad_enabled and any(
                    t.param or (t.leaf and t.requires_grad) for t in written))):
                self.stale = self.stale | {s.id for s in pending}
        if kind == "data":
            return target  # .data writes bypass the version counter and the graph
        for t in written:
            t.storage.version += 1
        # The write joins the operands' graphs into the target (and its bases, which autograd rebases); under
        # no_grad it records no grad_fn: the target gets the values, not their graph (`new.weight.copy_(old.weight)`).
        rg = self._grad(target, *operands)
        extra = frozenset().union(*(graph_of(v) for v in operands)) if operands and self.state.grad_enabled \
            else frozenset(m for v in operands for m in graph_of(v) if m in self.grad_off_ops)
        info = self.k.op(twin) if twin else None
        new_saves: set[int] = set()
        if info is not None and rg:
            args = [target, *operands]
            for pos, conds in info.saves_args.items():
                if pos == 0 or pos >= len(args) or not isinstance(args[pos], Tensor):
                    continue
                cond = self._cond_grad(args, conds)
                if cond:
                    new_saves.add(self._save(args[pos], twin, "input", node, cond == Grad.YES).id)
        for t in target.view_chain():
            t.graph = t.graph | extra | frozenset(new_saves)
            if rg and self.state.grad_enabled and rg > t.requires_grad:
                t.requires_grad = rg
                t.leaf = False  # it now has a grad_fn (CopySlices etc.)
        # `leaky_relu_` saves its result although `leaky_relu` saves its input (torch's in-place formula differs):
        # that save is named by the in-place function that makes it (`F.leaky_relu_`)
        result_saved = info.saves_result if info is not None else frozenset()
        op = f"nn.{module.cls}" if module is not None else twin  # the layer, as the code names it
        if twin in self.k.inplace_result_saved and not result_saved:
            result_saved, op = frozenset({0}), f"F.{twin}_"
        if rg and result_saved:
            cond = self._cond_grad([target, *operands], result_saved)
            if cond:
                saved = self._save(target, op, "output", node, cond == Grad.YES)
                for t in target.view_chain():
                    t.graph = t.graph | {saved.id}
        refused = self._sign_refused(node, twin, module) if rg == Grad.YES and self.state.grad_enabled else None
        if refused is not None and self.inline_record and self.mutations and self.mutations[-1].node is node:
            marker = new_id()
            for t in target.view_chain():
                t.graph = t.graph | {marker}
            self.mutations[-1].sign_refused, self.mutations[-1].sign_marker = refused, marker
        return target

    def _sign_refused(self, node: ast.AST, twin: str | None, module: ModuleValue | None) -> tuple[str, str, str] | None:
        """The in-place activation's parameter, when the code passes it a negative literal that torch's in-place
        backward refuses (the knowledge's ``inplace_sign_refused``): (name, value as written, torch's message)."""
        fact = self.k.inplace_sign_refused.get(twin) if twin else None
        if fact is None:
            return None
        if module is not None:
            call, position = module.ctor, fact["modules"].get(module.cls)
        else:
            call, position = node, fact["position"]
        if not isinstance(call, ast.Call) or position is None:
            return None
        written = self._written_args(call)
        given = written[position] if len(written) > position and not any(
            isinstance(a, ast.Starred) for a in written[:position + 1]) else next(
            (k.value for k in call.keywords if k.arg == fact["param"]), None)
        value = _literal_number(given)
        if value is None or value >= 0:
            return None
        return fact["param"], ast.unparse(given), fact["error"]

    def _written_args(self, call: ast.Call) -> list[ast.expr]:
        """The call's positional arguments as written, with ``*args`` of a followed call's parameter spread into the
        expressions its caller wrote for them (``F.leaky_relu_(t, *args)`` run for ``act(h, -0.5)`` has ``-0.5``
        second); any other starred value stays as it is."""
        args: list[ast.expr] = []
        for a in call.args:
            packed = self.state.env.get(a.value.id) if isinstance(a, ast.Starred) and isinstance(
                a.value, ast.Name) else None
            args.extend(packed.written if isinstance(packed, TensorSeq) and packed.written is not None else (a,))
        return args

    def _held_by_another(self, name: str, value: Value, stmt: ast.stmt) -> str | None:
        """For `name = x` or `name = f(x)` that gives back the very tensor another variable holds (a function
        returning its argument): that other variable."""
        if not (isinstance(value, Tensor) and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)):
            return None
        if isinstance(stmt.value, ast.Name):
            return stmt.value.id if stmt.value.id != name and self.state.env.get(stmt.value.id) is value else None
        if isinstance(stmt.value, ast.Call):
            return next((other for other, held in self.state.env.items() if held is value and other != name), None)
        return None

    def _second_name(self, node: ast.AST, target: Tensor, through: ast.expr | None
                     ) -> tuple[ast.stmt, str, str] | None:
        """An indexed write through a name bound as a second name of another name's tensor (`out = x` ...
        `out[i] = v`), while both still hold it: (that binding, the name written through, the other name).  A
        partial write cannot be made out of place where it is; a copy at the binding was meant.  (A whole-tensor
        op through the second name, `x += b`, is rewritten out of place where it is.)"""
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript)
                and isinstance(through, ast.Name)):
            return None
        name = through.id
        site = self.state.aliases.get(name)
        if site is None:
            return None
        held = self.state.env.get(name)
        if held is None or self.state.env.get(site[1]) is not held or not any(t is held for t in target.view_chain()):
            return None
        return site[0], name, site[1]

    def _conversion_site(self, target: Tensor, through: ast.expr | None) -> tuple[ast.stmt, str] | None:
        """A write through a name that a conversion to the dtype the tensor had already bound (`x = x.float()`
        of a float32 `x`), while it still holds that tensor: (that statement, the dtype).  A copy was meant there."""
        if not isinstance(through, ast.Name):
            return None
        entry = self.conversion_bindings.get((id(self.running_function()) if self.call_stack else None, through.id))
        if entry is None or self.state.env.get(through.id) is not entry[1] \
                or not any(t is entry[1] for t in target.view_chain()):
            return None
        return entry[0], entry[2]

    def _frame_of(self, env: dict[str, Value]) -> ast.AST | None | bool:
        """The running function whose variables ``env`` holds (None: the run's own; False: none running)."""
        envs = [*self.caller_envs, self.state.env]
        index = next((i for i, e in enumerate(envs) if e is env), None)
        return False if index is None else self.call_stack[index - 1].fn if index else None

    def _note_conversion(self, fn: ast.AST | None | bool, name: str, stmt: ast.stmt, value: Value) -> None:
        """``name`` of ``fn``'s frame bound by ``stmt`` to ``value``: remember whether a conversion to the dtype the
        tensor had already gave it (`x = x.float()`: the same tensor, no copy)."""
        if fn is False:
            return
        frame = (id(fn) if fn is not None else None, name)
        converted = self.conversion_made(stmt, value) if isinstance(stmt, ast.Assign) else None
        if converted is not None:
            self.conversion_bindings[frame] = converted
        else:
            self.conversion_bindings.pop(frame, None)

    def conversion_made(self, stmt: ast.Assign | ast.Return, value: Value) -> tuple[ast.stmt, Tensor, str] | None:
        """The conversion to the dtype it had already that gave ``stmt`` its value ``value``, the tensor itself:
        ``stmt``'s own (`x = x.float()`), one a followed call's every return hands back (`y = cast(h)` of a helper
        that returns `h.to(torch.float32)` or a name bound so); or, for a return, a name of its frame bound so
        (`return y`).  (the conversion's statement, the tensor, its dtype)"""
        if not isinstance(value, Tensor) or stmt.value is None:
            return None
        if id(stmt.value) in self.noop_conversions:
            return stmt, value, self.noop_conversions[id(stmt.value)]
        made = self.converted_returns.get(id(stmt.value))
        if made is None and isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Name):
            made = self.conversion_bindings.get((id(self.running_function()) if self.call_stack else None,
                                                 stmt.value.id))
        return made if made is not None and made[1] is value else None

    def _mark_hidden_write(self, mutation: Mutation, target: Tensor, kind: str) -> None:
        """A write autograd does not record (through ``.data``, a ``.detach()`` alias or a NumPy array, or with
        grad mode off) to a tensor with a grad_fn: backward differentiates that tensor as if it still held the
        old values.  A marker in its graph (and the written view's) tells the engine which later backward
        reads the new ones."""
        if kind == "step":
            return
        owner = graph_tensor_behind(target)
        through_alias = owner is not None and any(t.detached_from is owner for t in target.view_chain())
        # Grad mode is off inside a custom Function's forward by design: its own backward gives the gradient.
        grad_off = not self.state.grad_enabled and self.grad_mode_known and not self.function_contexts
        hidden = kind == "data" or through_alias or grad_off
        if owner is None or not hidden:
            return
        marker = new_id()
        graph_views = [t for t in target.view_chain() if not t.leaf and t.requires_grad != Grad.NO]
        for t in {id(t): t for t in (*owner.view_chain(), *graph_views)}.values():
            t.graph = t.graph | {marker}
        mutation.hidden_marker = marker
        mutation.hidden_from = snapshot(owner)

    def _own_values_hidden(self, stmt: ast.stmt, leaf: Tensor, value: Value) -> bool:
        """``w.data = torch.mul(w, mask)`` in a forward, with grad on: the leaf that requires grad takes values
        computed from itself, and autograd records none of that computation (the value's graph is dropped).  A later backward
        through the leaf gives it the gradient of the new values as if they were its own (the op's derivative
        left out), and the old values are gone.  Only when every link is known: a leaf that surely requires
        grad, a value that surely has a grad_fn reading it (grad mode on: known, or shown by the backward that
        reaches the leaf after, which GG102 asks for)."""
        if not (isinstance(value, Tensor) and leaf.leaf and leaf.requires_grad == Grad.YES and leaf.graph
                and not leaf.group and not leaf.assumed and not value.leaf and value.requires_grad == Grad.YES
                and leaf.graph <= value.graph and self.state.grad_enabled and not self.function_contexts
                and self.inline_record
                and self._in_own_forward(leaf)):
            return False
        leaf.storage = Storage()  # rebound: what a graph saved of the old values stays as it was
        self._inplace(stmt, leaf, "`.data =`", None, [], kind="data")
        mutation = self.mutations[-1]
        marker = new_id()
        leaf.graph = leaf.graph | {marker}
        mutation.hidden_marker, mutation.hidden_from = marker, snapshot(leaf)
        mutation.own_reads = self.own_value_reads[leaf.storage.id] = []
        return True

    def _in_own_forward(self, leaf: Tensor) -> bool:
        """A forward running now (this frame or one that called it) is that of a module holding ``leaf``, its own
        parameter or a submodule's: the module computes its output with it.  A module's forward that rewrites
        parameters it does not hold (a pruner run between steps) is an update, not part of the computation."""
        envs = [*self.caller_envs, self.state.env]  # frame k's variables: the root function's, then each followed
        frames = [("self" if self.is_forward else None, envs[0])]
        for call, env in zip(self.call_stack, envs[1:]):
            fn = call.fn
            params = [*fn.args.posonlyargs, *fn.args.args] if getattr(fn, "name", None) == "forward" else []
            frames.append((params[0].arg if params else None, env))
        return any(name is not None and leaf.storage.id in storages_in(env.get(name)) for name, env in frames)

    def _numpy_view(self, tensor: Tensor, node: ast.AST) -> Value:
        """``t.numpy()``: an array over ``t``'s memory (numbers read out of it, for GG103, when ``t`` has a graph)."""
        value = self._number_from(tensor, node, "`.numpy()`")
        if isinstance(value, NumberFrom):
            return NumberFrom(value.sources, value.origin, value.markers, array_of=tensor)
        return NumberFrom(frozenset(), node, array_of=tensor)

    def _array_write(self, node: ast.AST, array: NumberFrom, how: str) -> None:
        """An in-place write to a NumPy array that shares a tensor's memory: the tensor changes, no version moves."""
        self._inplace(node, array.array_of, how, None, [], kind="data")

    def _through_container(self, node: ast.AST) -> bool:
        """Is the expression a write goes through an element of a Python list or dict?"""
        if not self.container_reads:
            return False  # no element read yet: no need to walk the written expression (a long chain, each write)
        if isinstance(node, ast.AugAssign):
            written = node.target
        elif isinstance(node, ast.Assign):
            written = node.targets[0]
        elif isinstance(node, ast.Call):
            written = node.func.value if isinstance(node.func, ast.Attribute) else (node.args[0] if node.args else None)
        else:
            return False
        return written is not None and any(
            isinstance(n, ast.Subscript) and id(n.slice) in self.container_reads for n in ast.walk(written))

    def _data_write(self, node: ast.AST, alias: DataAlias, how: str, values: list[Value]) -> None:
        """Writes through ``.data`` bypass the version counter: autograd never notices, gradients go silently wrong.
        ``values``: what the written values are computed from (no graph joins the target)."""
        self._inplace(node, alias.tensor, how, None, [], kind="data", values=values)

    def _param_tensors(self, owner) -> list[Tensor]:
        """The parameter tensors we have seen of a module (or of several): those a graph can have saved."""
        found: list[Tensor] = []
        seen: set[int] = set()
        stack = list(owner) if isinstance(owner, list) else [owner]
        given = [v for v in stack if isinstance(v, Tensor)]
        while stack:
            value = stack.pop()
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, ParamIterable):
                stack.extend(value.owner if isinstance(value.owner, list) else [value.owner])
            elif isinstance(value, ModuleValue):
                stack.extend(value.attrs.values())
                stack.extend(value.children)
            elif isinstance(value, TensorSeq) and value.base is None:
                stack.extend(value.items)  # an `nn.ParameterList` held in an attribute, or a list of them
            elif isinstance(value, Tensor) and (value.param or value.group or (value in given and value.leaf)):
                found.extend(value.group or (value,))  # given: `SGD([w, b])` of leaves made with requires_grad
        return found

    def _optimizer_step(self, optimizer: OptimizerValue, node: ast.AST, name: str) -> None:
        """``opt.step()`` updates every parameter it owns in place, under no_grad."""
        # A parameter that does not require grad never gets a .grad, and every torch optimizer skips those.
        params = tuple(p for p in self._param_tensors(optimizer.owners) if p.requires_grad != Grad.NO)
        if not params:
            return
        written = tuple(p for p in params if not without_gradient(self, p))  # skipped: `.grad` is None
        proxy = Tensor(Storage(), Grad.YES, leaf=True, param=True, group=written or params, origin=optimizer.ctor,
                       label=f"the parameters `{name}` updates")
        self.grad_reads.append(GradRead(node, frozenset().union(*(p.graph for p in params)), f"`{name}.step()`",
                                          self._next(), path=self.frame_sites))
        self.optimizer_steps.append((optimizer, node, self._next()))
        self.step_runs.append(StepRun(optimizer, node, self.seq, frozenset().union(*(p.graph for p in params)),
                                      self.frame_sites, name,
                                      bool(isinstance(node, ast.Call) and (node.args or node.keywords))))
        grad_mode, self.state.grad_enabled = self.state.grad_enabled, False
        if written:
            self._inplace(node, proxy, f"`{name}.step()`", None, [], kind="step")
        self.state.grad_enabled = grad_mode

    def _graph_break(self, node: ast.AST, how: str, sources_from: list[Value], requires_grad: Grad) -> Tensor:
        """A new tensor built from values read out of tensors that require grad: their gradient path ends here."""
        of_tensor = len(sources_from) == 1 and isinstance(sources_from[0], Tensor)
        sources: frozenset[int] = frozenset()
        for value in sources_from:
            sources |= _grad_sources(value)
        graph: frozenset[int] = frozenset({new_id()}) if requires_grad else frozenset()
        read = _read_out_markers(sources_from, {cut.marker for cut in self.breaks if cut.handed_back})
        line = getattr(node, "lineno", None)
        if any(cut.marker in read and getattr(cut.node, "lineno", None) == line for cut in self.breaks):
            read = frozenset()  # read out on this line too (`torch.tensor([a.item(), b.item()])`): this line
        if sources and read:
            # Numbers read out of tensors (`.item()`, `.numpy()`) on other lines: the reads are where the graph was
            # left, this line where the numbers became a tensor again.
            seq = sources_from[0] if len(sources_from) == 1 and isinstance(sources_from[0], TensorSeq) else None
            for cut in self.breaks:
                if cut.marker in read and cut.rebuilt_at is None:
                    cut.rebuilt_at = node
                    if cut.appended_to is not None and seq is not None:
                        if cut.appended_to is not seq:
                            cut.rebuilds_its_list = False
                        elif self._read_on_line(seq, cut.node):
                            cut.rebuilds_its_list = True
            return new_tensor(node, requires_grad, leaf=True, graph=graph | read)
        if sources:
            marker = new_id()
            certain = all(_certainly_requires_grad(v) for v in sources_from)
            self.breaks.append(GraphBreak(node, how, sources, marker, certain=certain, of_tensor=of_tensor,
                                          of_list=_list_of(sources_from)))
            graph |= {marker}
        return new_tensor(node, requires_grad, leaf=True, graph=graph)

    def _read_on_line(self, seq: TensorSeq, line: ast.AST) -> bool:
        """Whether every element of ``seq`` is a number read out of a tensor by ``line`` (and by no other)."""
        at = {cut.marker: cut.node for cut in self.breaks}
        return all(isinstance(i, NumberFrom) and i.markers and all(at.get(m) is line for m in i.markers)
                   for i in seq.items)

    def _part_kept(self, stmt: ast.stmt, target: ast.Subscript, container: Tensor, value: Value) -> None:
        """``s = s.data.clone()`` then ``s[rows] = v``, ``v`` computed from the old ``s`` with its graph (the rows
        a recurrent step updates): the written rows carry the history ``.data`` cut, the other rows not."""
        whole = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
        if not isinstance(value, Tensor) or value.requires_grad != Grad.YES or all(
                isinstance(i, ast.Slice) and i.lower is i.upper is i.step is None
                or isinstance(i, ast.Constant) and i.value is Ellipsis for i in whole):
            return  # `s[:] = v`, `s[...] = v`: every part is written
        for cut in self.breaks:
            if (cut.cut and cut.how == "`.data`" and cut.kept_in_part is None and cut.marker in container.graph
                    and cut.sources and cut.sources <= value.graph and isinstance(cut.node, ast.Attribute)
                    and ast.dump(cut.node.value) == ast.dump(target.value)):
                cut.kept_in_part = stmt

    def read_data(self, alias: DataAlias, node: ast.AST) -> Tensor:
        """``t.data`` read as a value (an op's input, a layer's input): ``t``'s memory as a new leaf, cut from
        ``t``'s graph exactly as ``t.detach()`` is."""
        return self._cut(alias.node or node, alias.tensor, "`.data`")

    def _cut(self, node: ast.AST, tensor: Tensor, how: str) -> Tensor:
        """``t.detach()`` (or a returned ``t.data``): the same memory as a new leaf.  Whatever ``t`` was computed
        from gets no gradient through it; a marker in its graph shows whether it reaches a backward (the engine
        then asks whether a gradient the code relies on went missing)."""
        lost = tensor.graph | tensor.lost_sources if tensor.requires_grad else tensor.lost_sources
        # A value already cut (`t.data.detach()`) is cut once: it keeps the markers of that cut.
        graph: frozenset[int] = tensor.graph & self.cut_markers if not tensor.requires_grad else frozenset()
        for cut in self.breaks:
            if cut.cut and cut.marker in graph:
                cut.cut_again = True
        if tensor.requires_grad and tensor.graph:
            marker = new_id()
            self.breaks.append(GraphBreak(node, how, tensor.graph, marker, origin=tensor.origin,
                                          certain=tensor.requires_grad == Grad.YES, cut=True))
            self.cut_markers.add(marker)
            graph = frozenset({marker})
        return Tensor(tensor.storage, Grad.NO, leaf=True, origin=node, label=f"{tensor.label}{how.strip('`')}",
                      lost_sources=lost, graph=graph)

    def made_with_grad_off(self, result: Value, node: ast.AST, inputs: list[Value]) -> Value:
        """An op run with grad mode off (known) on a tensor that requires grad, or on a value made so: its result
        has no graph, which a marker in its graph remembers (a backward from it raises, see ``_backward``).  The
        marker replaces its inputs' own, so that each value names the last op that ran so."""
        # Grad mode at entry may be the caller's, but a switch this run saw turned it off for certain.
        if self.state.grad_enabled or not (self.grad_mode_known or self.grad_off_site) or self.function_contexts \
                or not isinstance(result, Tensor) or result.requires_grad != Grad.NO:
            return result
        values = [v for a in inputs for v in (a.items if isinstance(a, TensorSeq) else (a,))
                  if isinstance(v, (Tensor, Derived))]
        carried = frozenset(m for v in values for m in v.graph if m in self.grad_off_ops)
        if not carried and not any(v.requires_grad == Grad.YES for v in values):
            return result
        if self.grad_off_site is None:
            return result
        switch, depth = self.grad_off_site
        place = switch if depth is None else (
            self.frame_sites[depth] if len(self.frame_sites) > depth else self.frame_sites[depth - 1])
        marker = new_id()
        self.grad_off_ops[marker] = (node, place, switch)
        self.grad_off_opaque[marker] = frozenset(result.graph & self.opaque_markers)
        self.grad_off_sources[marker] = frozenset().union(
            *(self.grad_off_sources.get(m, frozenset()) for m in carried),
            *(v.graph for v in values if v.requires_grad != Grad.NO))
        result.graph = (result.graph - carried) | {marker}
        return result

    def numbers_as_constants(self, node: ast.AST, inputs: list[Value]) -> None:
        """An op on tensors given numbers read out of a tensor (``ret - v``): the first such op of each read."""
        markers = [v.markers for v in inputs if isinstance(v, NumberFrom) and v.markers]
        if not markers:
            return
        read = frozenset().union(*markers)
        for cut in self.breaks:
            if cut.marker in read and cut.constant_in is None:
                cut.constant_in = node

    def read_with_grad_on(self, node: ast.AST, inputs: list[Value]) -> None:
        """An op run with grad mode on that reads values computed with it off: the first such op of each."""
        if not self.grad_off_ops or not self.state.grad_enabled:
            return
        for value in inputs:
            for m in graph_of(value):
                if m in self.grad_off_ops and m not in self.grad_off_read:
                    self.grad_off_read[m] = node

    def dead_grad_off_terms(self, dead: frozenset[int], backward: ast.AST) -> None:
        """A loss a backward runs from whose term is computed only from values made with grad mode off (and cuts):
        a cut like ``.detach()``, placed where grad mode on first reads the value (reported only when it starves
        parameters an update uses, see the engine)."""
        known = {cut.marker for cut in self.breaks}
        for m in sorted(dead):
            if m in self.grad_off_read and m not in known and self.grad_off_sources.get(m):
                op, _, switch = self.grad_off_ops[m]
                self.breaks.append(GraphBreak(self.grad_off_read[m], "`torch.no_grad()`", self.grad_off_sources[m], m,
                                              certain=True, cut=True, dead_in=backward, grad_off=(op, switch)))

    def summed(self, result: Value, terms: list[Value]) -> Value:
        """A sum's result (``a + b``, ``sum(...)``), knowing which of its terms carry no gradient."""
        if isinstance(result, Tensor) and result.requires_grad != Grad.NO:
            result.dead_terms = self.dead_terms(terms)
            result.terms = tuple(graph for value in terms if isinstance(value, (Tensor, Derived))
                                 and value.requires_grad != Grad.NO
                                 for graph in (getattr(value, "terms", ()) or (value.graph,)))[:MAX_TERMS]
        return result

    def dead_terms(self, operands: list[Value]) -> frozenset[int]:
        """The cut markers of a sum's terms that carry no gradient (computed only from values a ``.detach()`` or
        ``.data`` cut from their graph), and of the sums among its terms."""
        dead: frozenset[int] = frozenset()
        for value in operands:
            if isinstance(value, Tensor):
                dead |= value.dead_terms
                if value.requires_grad == Grad.NO and value.graph and value.graph <= self.cut_markers:
                    dead |= value.graph
                elif value.requires_grad == Grad.NO and self.grad_off_read:
                    # computed from values made with grad mode off (the tensors beside them have no graph either)
                    dead |= frozenset(m for m in value.graph if m in self.grad_off_read)
        return dead

    def _number_from(self, value: Value, node: ast.AST, how: str) -> Value:
        """``loss.item()``, ``float(t)``, ``t.numpy()``: a plain value; if it flows back into a loss, the
        gradient through ``t`` is lost (recorded as a GraphBreak, confirmed only if it reaches a backward)."""
        if isinstance(value, NumberFrom):
            return value
        if not isinstance(value, Tensor):
            return NOT_TENSOR
        sources = _grad_sources(value)
        if not sources:
            return NOT_TENSOR
        marker, kept = new_id(), -1
        if value.requires_grad and value.graph:  # later uses of the tensor itself (each one it stands for) carry it
            kept = new_id()
            for tensor in (value, *(value.group or ())):
                tensor.graph = tensor.graph | {kept}
        self.breaks.append(GraphBreak(node, f"{how} and the arithmetic on its result", sources, marker,
                                      certain=value.requires_grad == Grad.YES or (
                                          bool(value.lost_sources) and value.detached_from is not None
                                          and value.detached_from.requires_grad == Grad.YES), kept_marker=kept))
        return NumberFrom(sources, node, frozenset({marker}))

    def detach_in_place(self, tensor: Tensor, node: ast.AST) -> Tensor:
        """``t.detach_()``: torch refuses it at once on a view; on a tensor that an op saved as an input (not as its
        output), the backward that unpacks that save raises.  Either way ``t`` is a leaf from here on."""
        if self.inline_record:
            pending = [] if tensor.base is not None else [
                s for s in self.saves.on({tensor.storage.id})
                if not s.consumed and s.role != "output" and not s.of_view and s.version == tensor.storage.version]
            mutation = Mutation(node, snapshot(tensor), "`.detach_()`", self.state.grad_enabled, self._next(),
                                pending=pending, kind="detach", grad_mode_known=self.grad_mode_known,
                                refused_view=_certainly_a_view(tensor))
            if self.call_stack:
                mutation.frames = [(call.site, call.mark) for call in self.call_stack]
            mutation.moment = self.run_log.moment(tensor, [*self.caller_envs, self.state.env], tuple(self.scopes), node)
            mutation.written_through = _written_through(node)
            self.mutations.append(mutation)
        self.note_detach(tensor, node)
        tensor.requires_grad, tensor.leaf, tensor.graph = Grad.NO, True, frozenset()
        return tensor

    def note_detach(self, tensor: Tensor, node: ast.AST) -> None:
        if tensor.requires_grad and tensor.graph:
            marker = 0
            if not tensor.leaf:
                marker = new_id()
                tensor.graph = tensor.graph | {marker}
            self.detaches.append(Detach(node, self.frame_sites, self._next(), tensor.graph, marker))

    def _number_backward(self, number: NumberFrom, node: ast.AST) -> None:
        """``loss.backward()`` on a Python number or NumPy value computed from values read out of tensors: it has
        no ``backward`` (Python raises AttributeError); the lines that read the values out are where it left the
        graph."""
        for cut in self.breaks:
            if cut.marker in number.markers and cut.number_backward is None:
                cut.number_backward = node

    def _cond_grad(self, args: list[Value], positions) -> Grad:
        return max((args[p].requires_grad for p in positions if p < len(args) and isinstance(args[p], Tensor)),
                   default=Grad.NO)


def _holding(env: dict, optimizer: OptimizerValue) -> set[str]:
    """The variables of ``env`` that hold ``optimizer`` (``opt``), and the attributes of the instances they hold that
    do (``self.opt``), as ``_replacement_site`` finds it at hand."""
    return {k for k, v in env.items() if v is optimizer} | {
        f"{k}.{a}" for k, v in env.items() if isinstance(v, ModuleValue) for a, x in v.attrs.items() if x is optimizer}


def _certainly_requires_grad(value: Value) -> bool:
    if isinstance(value, Tensor):
        return value.requires_grad == Grad.YES or bool(value.lost_sources)
    if isinstance(value, TensorSeq):
        return any(_certainly_requires_grad(i) for i in value.items)
    return isinstance(value, (NumberFrom, Derived))


def _list_of(values: list[Value]) -> str | None:
    """What the one list or tuple a rebuild reads holds, when the run knows its elements (``GraphBreak.of_list``)."""
    seq = values[0] if len(values) == 1 else None
    if not isinstance(seq, TensorSeq) or seq.base is not None or not seq.items:
        return None
    if all(isinstance(i, Tensor) for i in seq.items):
        return "tensors"
    if all(isinstance(i, (Tensor, Derived)) for i in seq.items):
        return "computed"
    return "mixed"


def _read_out_markers(values: list[Value], handed_back: set[int]) -> frozenset[int]:
    """The markers of the reads that made these values, when every value with a gradient path behind it is a number
    read out of a tensor (and so already a recorded graph break) by code that kept it, not by a helper that handed
    it back to its caller; empty otherwise."""
    items = [i for v in values for i in (v.items if isinstance(v, TensorSeq) and v.base is None else (v,))]
    behind = [i for i in items if _grad_sources(i)]
    if not behind or not all(isinstance(i, NumberFrom) and i.markers and not i.markers & handed_back
                             for i in behind):
        return frozenset()
    return frozenset().union(*(i.markers for i in behind))


def _grad_sources(value: Value) -> frozenset[int]:
    """Graph ids of what a value was computed from, when it (or the tensor it was read from) requires grad."""
    if isinstance(value, Tensor):
        return value.graph | value.lost_sources if value.requires_grad or value.lost_sources else frozenset()
    if isinstance(value, NumberFrom):
        return value.sources
    if isinstance(value, Derived):
        return value.graph if value.requires_grad else frozenset()
    if isinstance(value, TensorSeq):
        return frozenset().union(*(_grad_sources(i) for i in value.items)) if value.items else frozenset()
    return frozenset()


def _written_through(node: ast.AST) -> ast.expr | None:
    """The variable or attribute a write goes through: `out` of `out[i] = v`, `out += v`, `out[i].mul_(2)`;
    `self.scale` of `self.scale.mul_(m).add_(v)`; None for other forms."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        expr = node.targets[0]
    elif isinstance(node, ast.AugAssign):
        expr = node.target
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        expr = node.func.value
    else:
        return None
    return _through_of(expr)


def _through_of(expr: ast.expr) -> ast.expr | None:
    """The variable or attribute the written expression goes through (``q`` of the target ``q[:, 1:]``, one of
    the targets of ``q[:, 1:], k[:, 1:] = ...``)."""
    while True:
        if isinstance(expr, ast.Subscript):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            expr = expr.func.value
        else:
            return expr if isinstance(expr, (ast.Name, ast.Attribute)) else None


def _flag_written(stmt: ast.stmt) -> tuple[str, ast.expr] | None:
    """``p.requires_grad = v`` or ``p.requires_grad_(v)`` as a statement: (``p``, ``v``)."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
        if isinstance(target, ast.Attribute) and target.attr == "requires_grad" and isinstance(target.value, ast.Name):
            return target.value.id, stmt.value
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        if (isinstance(call.func, ast.Attribute) and call.func.attr == "requires_grad_"
                and isinstance(call.func.value, ast.Name) and len(call.args) == 1 and not call.keywords):
            return call.func.value.id, call.args[0]
    return None


def _names_requires_grad(cls: ast.ClassDef) -> bool:
    """Does the class define or use an attribute ``requires_grad`` of its own (a method, a class attribute,
    ``self.requires_grad``)?"""
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "requires_grad":
            return True
        if isinstance(node, ast.Name) and node.id == "requires_grad":
            return True
        if (isinstance(node, ast.Attribute) and node.attr == "requires_grad" and isinstance(node.value, ast.Name)
                and node.value.id == "self"):
            return True
    return False


def _names_written_in_place(body: list[ast.stmt]) -> set[str]:
    """Names that an augmented assignment, an indexed store or a trailing-underscore method writes."""
    names: set[str] = set()
    for node in (n for stmt in body for n in ast.walk(stmt)):
        target = None
        if isinstance(node, ast.AugAssign):
            target = node.target
        elif isinstance(node, ast.Assign):
            target = next((t for t in node.targets if isinstance(t, ast.Subscript)), None)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_"):
            target = node.func.value
        while isinstance(target, (ast.Subscript, ast.Attribute)):
            target = target.value
        if isinstance(target, ast.Name):
            names.add(target.id)
    return names


def _branches_may_leave(stmt: ast.If) -> bool:
    return _may_leave([*stmt.body, *stmt.orelse])


def _may_leave(body: list[ast.stmt]) -> bool:
    """Whether statements hold a ``return``, ``raise``, ``break`` or ``continue`` (outside nested definitions): the
    code after them may not run."""
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Return, ast.Raise, ast.Break, ast.Continue)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
    return False


def _jumps_out(body: list[ast.stmt]) -> bool:
    """Whether a loop's body holds a ``break`` or ``continue`` of its own (one that may skip the rest of it)."""
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Break, ast.Continue)):
            return True
        if not isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef,
                                 ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
    return False


def _runs_once(iterable: ast.expr) -> bool:
    """``for _ in range(1)``, ``for x in [a]``: a loop whose body runs exactly once."""
    if isinstance(iterable, (ast.List, ast.Tuple)):
        return len(iterable.elts) == 1 and not isinstance(iterable.elts[0], ast.Starred)
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "range":
        bounds = [_const_int(a) for a in iterable.args]
        if len(bounds) == 1 and bounds[0] is not None:
            return bounds[0] == 1
        if len(bounds) == 2 and None not in bounds:
            return bounds[1] - bounds[0] == 1
    return False


_INT_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def _pure(node: ast.expr) -> bool:
    """An expression whose evaluation changes nothing: names, attributes, literals and arithmetic on them."""
    return all(isinstance(n, (ast.Name, ast.Attribute, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator,
                              ast.unaryop, ast.Load)) for n in ast.walk(node))


def _submodules(iterable: ModuleIterable) -> list[ModuleValue] | None:
    """What ``owner.modules()`` (the owner, then every descendant, each once) or ``owner.children()`` yields, when
    every one of them is a module we built; None when one is not known (a layer we cannot see)."""
    owner = iterable.owner
    if not isinstance(owner, ModuleValue):
        return None
    found: list[ModuleValue] = []

    def visit(module: ModuleValue, depth: int) -> bool:
        if any(m is module for m in found):
            return True
        if module.cls == "<unknown>" or len(found) > _UNROLLED_LAYERS:
            return False
        if depth > 0 or iterable.recursive:
            found.append(module)
        if depth > 0 and not iterable.recursive:
            return True
        subs = [*module.children, *(v for k, v in module.attrs.items() if isinstance(v, ModuleValue) and k != "<owner>")]
        return all(visit(sub, depth + 1) for sub in subs)

    return found if visit(owner, 0) else None


def _literal_number(node: ast.expr | None) -> float | None:
    """A number written as a literal (``-2``, ``-0.2``, ``+1e-2``), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _literal_number(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    return None
