"""Who reads a name after a write, as the interpreter ran the code: the order statements ran in, per frame.

The interpreter appends each statement it runs to a ``RunLog`` (one list append: the analysis stays linear),
with the frame it ran in (a followed call runs in a frame of its own, so its names are other variables).
Where a statement may run although the run did not show it, the log says so with a marker at that point:

- ``Skipped``: a branch the interpreter left out because it took its test for known (a flag's default may
  differ at another call), so its reads count as reads at that point;
- ``Repeats``: a loop may run again (or once more than the interpreter ran it, and its test once more):
  what its body reads before binding it (a ``for``'s target is bound first) counts as read after each write
  inside it.

A plain assignment to a name ends the reads of the value it held (``xs = []`` made afresh in each iteration):
a read after it, in the assignment's block or nested in a later statement of it, reads the new value.  Python
enters a block's middle only through the statements before it, so the only other way to such a read is from a
write already inside that tail, and that way is logged before the assignment runs again.

Beside the order, the log keeps which storages escaped the analysis (passed to a call it cannot see into, stored
into an attribute or element of something it does not follow: ``Interpreter._sink``), and a write's moment
keeps the variables that held the written tensor then (``holders``): a name bound to it, a list, dict or object
holding it.  A view or base of it held under another name is a different tensor over the same memory (``views``).
Each frame keeps the call it was entered through, so a caller's call that led to a write is a point of the run
too (``Moment.through``): what the caller's names hold and read after it.  Each storage keeps the writes of it in
run order, so the writes of the same memory before one are a lookup too (``Moment.earlier_writes``).

A ``Mutation`` carries a ``Moment`` (the log and its position when the write ran); "is ``name``'s value read
after the write" is then a lookup in an index of the log built once, on the first question: the reads of each
name in each frame, in run order, value reads apart from metadata reads (``.shape``, ``.grad``: they do not
read the values a write changes).  What a statement reads is its own code only: the bodies of compound
statements run (and are logged) as statements of their own; nested functions, lambdas and classes run
elsewhere.
"""

from __future__ import annotations

import ast
import bisect
from dataclasses import dataclass, field, replace
from typing import AbstractSet

from ..knowledge.names import NON_VALUE_ATTRS
from ..statements import CLAUSE_FIELDS, NESTING_FIELDS, SCOPES, blocks, syntax_fact
from .values import DataAlias, ModuleValue, NumberFrom, Tensor, TensorMap, TensorSeq, Value, disjoint

HELD_DEPTH = 3  # how deep holders are looked into: a list of dicts of tensors, an object's list of tensors

_NESTED_STATEMENTS = frozenset(NESTING_FIELDS)


@dataclass(frozen=True)
class Skipped:
    """Statements a branch holds that the run left out (``if`` with a test taken for known)."""

    block: tuple[ast.stmt, ...]


@dataclass(frozen=True)
class Repeats:
    """A loop that may run again: everything its body (and a ``while``'s test) reads may be read after any of
    its statements."""

    loop: ast.stmt


Entry = ast.stmt | Skipped | Repeats


class RunLog:
    """The statements one interpreter ran, in order, each with the frame it ran in."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.frames: list[int] = []
        self.stack: list[int] = [0]  # the frames open now, outermost first
        self._made = 0
        self._index: dict[tuple[int, str], tuple[list[int], list[ast.Name]]] = {}
        self._meta: dict[tuple[int, str], list[int]] = {}
        self._indexed = 0
        self.block: list[ast.stmt] | None = None  # the block the running statement is in (``Interpreter.run_block``)
        self._blocks: dict[int, list[ast.stmt]] = {}  # position of an assignment -> its block
        # (frame, name) -> (positions of assignments to it, where their blocks' tails start and end)
        self._stores: dict[tuple[int, str], tuple[list[int], list[tuple[tuple[int, int], tuple[int, int]]]]] = {}
        self._exposed: dict[int, list[tuple[ast.Name, bool]]] = {}  # id of a loop -> ``_reads`` of its ``Repeats``
        # storages a value handed where the analysis cannot follow it held, each with where that first happened
        self.escaped: dict[int, ast.AST] = {}
        self.parameters: dict[int, dict[str, frozenset[int]]] = {}  # frame -> its parameters' memory at entry
        # id of a write's node -> the moments of its runs (a loop: each); ``Moment.through`` adds those through a call
        self.writes: dict[int | tuple[int, int], list[Moment]] = {}
        # written storage -> (position, node) of each write of it (an in-place detach too), in run order
        self.written: dict[int, list[tuple[int, ast.AST]]] = {}
        self.sites: dict[int, ast.AST] = {}  # frame -> the call it was entered through
        self.callers: dict[int, int] = {}  # frame -> the frame that entered it
        # written storage -> (frame, node) of each read of its values from its first write on, in run order: an op's
        # operand, a layer's call (its parameters), a call the analysis cannot see into, a return (``value_taken``)
        self.taken: dict[int, list[tuple[int, ast.AST]]] = {}
        self.functions: dict[int, ast.AST] = {}  # frame -> the function (def or lambda) it runs

    # ------------------------------------------------------------ recording (the interpreter's hooks)
    def ran(self, entry: Entry) -> None:
        if type(entry) in _ASSIGNMENTS and self.block is not None:
            self._blocks[len(self.entries)] = self.block
        self.entries.append(entry)
        self.frames.append(self.stack[-1])

    def enter(self, site: ast.AST, function: ast.AST | None = None) -> None:
        """A followed call of ``function`` starts at ``site``: its statements run in a new frame."""
        self._made += 1
        self.callers[self._made] = self.stack[-1]
        self.stack.append(self._made)
        self.sites[self._made] = site
        if function is not None:
            self.functions[self._made] = function

    def leave(self) -> None:
        self.stack.pop()

    def escape(self, value: Value, node: ast.AST) -> None:
        """``value`` goes where the analysis cannot see what keeps it (``Interpreter._sink("escape", ...)``)."""
        memory = storages_in(value)
        if not memory:
            return  # holds no tensor (most values): nothing escapes, nothing is taken
        for storage in memory:
            self.escaped.setdefault(storage, node)
        if self.taken:  # ``value_taken([value], node)``, without working out ``memory`` again
            for storage in memory & self.taken.keys():
                self.taken[storage].append((self.stack[-1], node))

    def value_taken(self, values: list[Value], node: ast.AST, operands: list[ast.expr] | None = None) -> None:
        """An op (a layer: its parameters too), a call the analysis cannot see into or a return takes the values of
        ``values`` (``operands``: the expression that gave each, when the code shows it): kept for the memory a
        write changed before (``Moment.values_taken_after``)."""
        for i, value in enumerate(values if self.taken else ()):
            for storage in storages_in(value) & self.taken.keys():
                self.taken[storage].append((self.stack[-1], operands[i] if operands is not None else node))

    def parameters_bound(self, env: dict[str, Value], names: tuple[str, ...]) -> None:
        """The running frame's parameters, as bound at its entry: whatever memory they hold, the caller holds (and
        what is read out of them as memory of its own, ``reached_through``)."""
        bound = {}
        for name in names:
            memory = storages_in(env.get(name))
            if memory:
                bound[name] = frozenset(memory)
        self.parameters[self.stack[-1]] = bound

    def reached_through(self, container: Value, reached: Value) -> None:
        """``reached`` was read out of ``container`` as memory of its own (``inputs[0]`` of an argument taken for one
        tensor may be an item of the caller's tuple): whichever open frame's parameter holds ``container``, the
        caller holds ``reached`` too."""
        through, memory = storages_in(container), frozenset(storages_in(reached))
        for frame in self.stack:
            bound = self.parameters.get(frame, {})
            for name, had in bound.items():
                if had & through:
                    bound[name] = had | memory

    def moment(self, written: Tensor | None = None, envs: list[dict[str, Value]] | None = None,
               scopes: tuple[dict[str, Value], ...] = (), node: ast.AST | None = None) -> Moment:
        """Now, for a write to ``written``: whether its memory escaped before, which parameters of each open frame
        had it from the caller, and (when ``envs`` are given: each open frame's variables, outermost first, and
        ``scopes``, the enclosing and module ones of the innermost) the variables that hold it."""
        frames = tuple(self.stack)
        if written is None:
            return Moment(self, len(self.entries), frames)
        memory = {t.storage.id for t in (written.group or (written,))}
        for storage in memory:
            self.taken.setdefault(storage, [])
        held, places = holders(envs[-len(frames):], scopes, written, memory) if envs is not None else (None, ())
        params = tuple(tuple(sorted(name for name, had in self.parameters.get(frame, {}).items() if had & memory))
                       for frame in frames)
        now = Moment(self, len(self.entries), frames, held, frozenset(memory & self.escaped.keys()), params, id(node),
                     taken=tuple((s, len(self.taken[s])) for s in sorted(memory)), places=places)
        if node is not None:
            self.writes.setdefault(id(node), []).append(now)
            for storage in memory:
                self.written.setdefault(storage, []).append((now.position, node))
        return now

    # ------------------------------------------------------------ the index
    def _indexed_up_to_now(self) -> None:
        for position in range(self._indexed, len(self.entries)):
            frame = self.frames[position]
            entry = self.entries[position]
            block = self._blocks.get(position)
            if block is not None:
                tail = ((entry.end_lineno, entry.end_col_offset), (block[-1].end_lineno, block[-1].end_col_offset))
                for name in _assigned(entry):
                    positions, tails = self._stores.setdefault((frame, name), ([], []))
                    positions.append(position)
                    tails.append(tail)
            if isinstance(entry, Repeats):
                reads = self._exposed.get(id(entry.loop))
                if reads is None:
                    reads = self._exposed[id(entry.loop)] = _exposed_reads(entry.loop)
            else:
                reads = _reads(entry)
            for load, metadata in reads:
                key = (frame, load.id)
                if metadata:
                    self._meta.setdefault(key, []).append(position)
                else:
                    positions, loads = self._index.setdefault(key, ([], []))
                    positions.append(position)
                    loads.append(load)
        self._indexed = len(self.entries)

    def value_reads(self, frame: int, name: str, after: int) -> list[ast.Name]:
        """The loads of ``name`` in ``frame`` that read the value it holds at position ``after``, from there on."""
        self._indexed_up_to_now()
        positions, loads = self._index.get((frame, name), ((), ()))
        return [loads[i] for i in self._unbound(frame, name, after, positions)]

    def value_read(self, frame: int, name: str, after: int) -> bool:
        """Whether the value ``name`` holds at position ``after`` in ``frame`` is read from there on."""
        self._indexed_up_to_now()
        positions = self._index.get((frame, name), ((),))[0]
        return next(self._unbound(frame, name, after, positions), None) is not None

    def _unbound(self, frame: int, name: str, after: int, positions: list[int]):
        """The indexes in ``positions`` (reads of ``name`` in ``frame``, in run order) from ``after`` on of the
        reads no assignment to ``name`` ran before since ``after`` in whose block's tail they are (module
        docstring)."""
        start = bisect.bisect_left(positions, after)
        stores, tails = self._stores.get((frame, name), ((), ()))
        first = bisect.bisect_left(stores, after)
        for i in range(start, len(positions)):
            position = positions[i]
            if first < len(stores) and stores[first] < position:
                at = _start(self.entries[position])
                last = bisect.bisect_left(stores, position)
                if any(begin <= at <= end for begin, end in tails[first:last]):
                    continue
            yield i

    def read_in_other_frames(self, frame: int, name: str, after: int) -> bool:
        """Whether a variable called ``name`` is read (its value or its metadata) from ``after`` on in any frame but
        ``frame``: a nested function reading the enclosing one's variable runs in a frame of its own."""
        self._indexed_up_to_now()
        lists = [positions for (at, read), (positions, _) in self._index.items() if read == name and at != frame]
        lists += [positions for (at, read), positions in self._meta.items() if read == name and at != frame]
        return any(bisect.bisect_left(positions, after) < len(positions) for positions in lists)

    def metadata_read(self, frame: int, name: str, after: int) -> bool:
        """Whether the metadata (``.shape``, ``.grad``...) of the value ``name`` holds at ``after`` in ``frame`` is
        read from there on."""
        self._indexed_up_to_now()
        positions = self._meta.get((frame, name), ())
        return next(self._unbound(frame, name, after, positions), None) is not None


@dataclass(frozen=True)
class Moment:
    """A point of a run: what a write carries, to ask what the code does with its names afterwards."""

    log: RunLog
    position: int
    frames: tuple[int, ...]  # the frames open then, outermost first (the unit's own is the first)
    # (name, how, frame) of the variables that held the written memory then (``holders``); frame: the index in
    # ``frames`` of the frame whose variable it is, None for a variable of an enclosing function or the module.
    # None: not looked for.
    holders: tuple[tuple[str, str, int | None], ...] | None = None
    # The memory was handed, before the write, to something the analysis cannot see into (its storages).
    escapes: frozenset[int] | set[int] = frozenset()
    # For each open frame: its parameters whose value at the frame's entry shared the written memory (the
    # caller holds it too).
    parameters: tuple[tuple[str, ...], ...] = ()
    # id of the write's node: its other runs (a loop's next iteration) are ``RunLog.writes``; (id, id of a call)
    # for its runs through that call (``through``)
    write: int | tuple[int, int] = 0
    # The same write as other analyses ran it (another function's run that called down to it, in another log):
    # a caller's call this run did not make may be one of theirs (``through``).  Set by whoever joins the runs.
    elsewhere: tuple[Moment, ...] = ()
    # The written memory's storages, each with how many reads of its values the log had kept then (``RunLog.taken``)
    taken: tuple[tuple[int, int], ...] = ()
    # (name, key, frame, place) of the variables of ``frames`` (key None), and the items of their lists and dicts
    # (`name[key]`), bound to a tensor of the written one's view chain: place 0 the written tensor itself, 1 what it
    # is a view of, and so on; or to a list or dict it is read out of (below 0, one place per object) (``holders``)
    places: tuple[tuple[str, object, int, int], ...] = ()

    @property
    def escaped(self) -> bool:
        return bool(self.escapes)

    def runs(self) -> list[Moment]:
        """This write's moments in every run of it in a frame as deep (a loop runs it again: what was bound in
        one iteration holds the memory at the next write)."""
        return [m for m in self.log.writes.get(self.write, [self]) if len(m.frames) == len(self.frames)] or [self]

    def escape_sites(self) -> list[ast.AST]:
        """Where the written memory was handed to what the analysis cannot see into, before any run of the write."""
        storages = set().union(*(m.escapes for m in self.runs()))
        return sorted({id(n): n for n in (self.log.escaped[s] for s in storages)}.values(),
                      key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))

    def values_taken_after(self, depth: int = -1) -> list[ast.AST] | None:
        """What in frame ``depth``'s code takes the written memory's values after this run of the write, as the run
        went: an op's operand (``self.fc.weight``, ``w[0]``), a layer's call reading its parameters (``self.fc(x)``),
        a call the analysis cannot see into or a return that takes it, or the call of a followed function whose code
        does any of those.  None when the run may not show them all: a loop that may run again, or a branch it left
        out, after the write in that frame or a call it made."""
        log, frame = self.log, self.frames[depth]

        def below(at: int) -> ast.AST | bool:  # True: ``frame`` itself; the call of ``frame`` ``at`` runs under
            child = None
            while at != frame:
                if at not in log.callers:
                    return False  # (not a frame ``frame`` entered)
                child, at = at, log.callers[at]
            return True if child is None else log.sites[child]

        if not self.taken:
            return None
        if any(isinstance(entry, (Skipped, Repeats)) and below(at) is not False
               for entry, at in zip(log.entries[self.position:], log.frames[self.position:])):
            return None
        found: dict[int, ast.AST] = {}
        for storage, start in self.taken:
            for at, node in log.taken[storage][start:]:
                site = below(at)
                if site is not False:
                    node = node if site is True else site
                    found[id(node)] = node
        return list(found.values())

    def earlier_writes(self) -> list[ast.AST]:
        """The other writes of the written memory (in any frame: a followed call's, its caller's) that ran before
        the first run of this one, in run order: what mending this write alone leaves as it was."""
        own = self.write if isinstance(self.write, int) else self.write[0]
        first = min(m.position for m in self.log.writes.get(own, [self]))
        found: dict[int, tuple[int, ast.AST]] = {}
        for storage, _ in self.taken:
            for position, node in self.log.written.get(storage, ()):
                if position >= first:
                    break
                if id(node) != own:
                    found.setdefault(id(node), (position, node))
        return [node for _, node in sorted(found.values(), key=lambda p: p[0])]

    def frame_index(self, depth: int = -1) -> int:
        return depth % len(self.frames)

    def entered_at(self, site: ast.AST) -> tuple[int, ast.AST] | None:
        """(depth, function) of the open frame entered through the call at ``site`` (a hook torch calls: its register
        call), None when no frame of this write was."""
        return next(((depth, self.log.functions[frame]) for depth, frame in enumerate(self.frames)
                     if self.log.sites.get(frame) is site and frame in self.log.functions), None)

    def call_sites(self) -> list[ast.AST]:
        """The followed calls (outermost first) that entered the frames open at this point."""
        return [self.log.sites[frame] for frame in self.frames[1:] if frame in self.log.sites]

    def value_reads_after(self, name: str, depth: int = -1) -> list[ast.Name]:
        """The reads of ``name``'s value after this point, in the frame ``depth`` (the innermost by default; 0 is
        the analysed function's own, where a write inside a followed call is entered by its call site)."""
        return self.log.value_reads(self.frames[depth], name, self.position)

    def value_read_after(self, name: str, depth: int = -1) -> bool:
        return self.log.value_read(self.frames[depth], name, self.position)

    def held(self, depth: int = -1) -> list[tuple[str, str]]:
        """(name, how) of the variables of frame ``depth`` that held the written memory at this run of the write
        (``holders``)."""
        index = self.frame_index(depth)
        return [(name, how) for name, how, frame in self.holders or () if frame == index]

    def place(self, name: str, key: object = None, depth: int = -1) -> int | None:
        """Which tensor of the written one's view chain (or list or dict it is read out of) ``name`` (``name[key]``:
        an item of it) of frame ``depth`` was bound to at this run of the write (``places``); None: none of them.
        Two names at one place were bound to the one object."""
        index = self.frame_index(depth)
        return next((p for n, k, frame, p in self.places if n == name and k == key and frame == index), None)

    def held_in_any_run(self, depth: int = -1) -> list[tuple[str, str]]:
        """``held``, at any run of the write (``runs``)."""
        return list(dict.fromkeys(pair for m in self.runs() for pair in m.held(depth)))

    def through(self, call: ast.AST) -> tuple[Moment, int] | None:
        """A run of this write that a followed call at ``call`` led to, with the depth of the frame that made the
        call (what the caller's names hold then is what they hold at the call), in this log or, when none went
        through it here, another analysis's (``elsewhere``); None when no run went through it."""
        return next((found for moment in (self, *self.elsewhere) if (found := moment._through(call)) is not None), None)

    def _through(self, call: ast.AST) -> tuple[Moment, int] | None:
        sites = self.log.sites
        through = [run for run in self.log.writes.get(self.write, [self])
                   if any(sites.get(frame) is call for frame in run.frames[1:])]
        if not through:
            return None
        key = (self.write, id(call))  # its runs through the call only (``runs``): another call passed other memory
        self.log.writes[key] = [replace(run, write=key) for run in through]
        first = self.log.writes[key][0]
        return first, next(depth for depth, frame in enumerate(first.frames[1:]) if sites.get(frame) is call)

    def seen(self, name: str, depth: int = -1, deeper: bool = True) -> tuple[list[str], list[str], list[str]]:
        """Who besides ``name`` (a variable of frame ``depth``) may see what this write changes, as its runs show:
        (views, holders, outside).  views: the frame's variables over the same memory (the tensor under another
        name, a view or base of it) that read its value after a run of the write; holders: the frame's lists,
        dicts and objects holding it that are read after; outside: the variables of other frames that held it (an
        enclosing function's or the module's, a call's it made; a caller's when no parameter brought it in: a
        parameter that did is ``callers_pass``).  ``deeper`` False: the frames of the calls on the way down to the
        write (the helper's parameter that holds what the call passed) are not outside."""
        views: list[str] = []
        held: list[str] = []
        for other, how in self.held_in_any_run(depth):
            if other != name and self.value_read_after(other, depth):
                (held if how == "holder" else views).append(other)
        own, callers = self.frame_index(depth), self.callers_pass(depth)
        outside = [other for other, frame in self.held_outside(depth)
                   if frame is None or (frame > own and deeper) or (frame < own and not callers)]
        return views, held, outside

    def held_outside(self, depth: int = -1) -> list[tuple[str, int | None]]:
        """(name, frame) of the variables that held the written memory, at any run of the write, in other frames
        than ``depth``: its callers' (earlier frames), the calls it made (later ones), an enclosing function's or
        the module's (frame None)."""
        index = self.frame_index(depth)
        return sorted({(name, frame) for m in self.runs() for name, _, frame in m.holders or () if frame != index},
                      key=lambda p: (p[1] is None, p[1] or 0, p[0]))

    def callers_pass(self, depth: int = -1) -> list[str]:
        """The parameters of frame ``depth`` whose value at its entry shared the written memory: the caller
        holds that memory too."""
        index = self.frame_index(depth)
        return sorted({p for m in self.runs() for p in (m.parameters[index] if m.parameters else ())})

    def others_read_after(self, name: str) -> list[str]:
        """The variables besides ``name`` (the write's own frame's) that held the written memory at some run of
        the write, at any call depth, and read its value after that run: in their frame as the run went, or, for
        a caller's, later in the statement whose call led to the write (``y = f(x) + x``).  A rebinding of
        ``name`` instead of the write changes what they read: empty when nothing does, as far as the runs show.
        "?" stands for what the runs cannot tell: the memory escaped, or a module's or enclosing function's
        variable held it."""
        return sorted({held for held, _ in self._readers_after(name)})

    def only_callers_read_after(self, name: str | None) -> list[str]:
        """``others_read_after``, when the write's own frame goes on reading ``name`` (the write is a step of its
        computation, whose result it hands on) and every one of them is a variable of a caller (a frame that led
        down to the write): its own frame reads nothing else that holds the memory, and nothing escaped.  A write
        breaking a save for backward, made out of place, then leaves the callers the values the backward was
        given.  Empty otherwise."""
        readers = self._readers_after(name) if name is not None and self.value_read_after(name) else {("?", None)}
        if any(caller is not True for _, caller in readers):
            return []
        return sorted({held for held, _ in readers})

    def callers_read_after(self, skip: int = 0) -> list[str]:
        """The variables of callers more than ``skip`` frames above the write's own (frames that led down to it)
        that held the written memory and read its value after the write: the write reaches them."""
        found: set[str] = set()
        for run in self.log.writes.get(self.write, [self]):
            own = len(run.frames) - 1
            for held, _, frame in (run.holders or ()):
                if frame is not None and frame < own - skip and run._caller_reads(frame, held):
                    found.add(held)
        return sorted(found)

    def holders_read_after(self) -> list[str]:
        """The lists, dicts and objects of any frame that held the written memory at a run of the write and read
        their value after it: in their frame as the run went, or, for a caller's, after the call that led down to
        the write.  "?" for one of an enclosing function or the module (read where the runs cannot tell)."""
        found: set[str] = set()
        for run in self.log.writes.get(self.write, [self]):
            own = len(run.frames) - 1
            for held, how, frame in (run.holders or ()):
                if how != "holder":
                    continue
                if frame is None:
                    found.add("?")
                elif self.log.value_read(run.frames[frame], held, run.position) \
                        or frame < own and run._read_after_the_call(frame, held):
                    found.add(held)
        return sorted(found)

    def _readers_after(self, name: str) -> set[tuple[str, bool | None]]:
        """(variable, whether it is a caller's; None: unknown) of ``others_read_after``."""
        found: set[tuple[str, bool | None]] = set()
        for run in self.log.writes.get(self.write, [self]):
            own = len(run.frames) - 1
            if run.holders is None or run.escapes:
                found.add(("?", None))
                continue
            for held, _, frame in run.holders:
                if frame is None:
                    found.add(("?", None))
                elif frame == own:
                    if held != name and self.log.value_read(run.frames[frame], held, run.position):
                        found.add((held, False))
                elif run._caller_reads(frame, held):
                    found.add((held, frame < own))
        return found

    def _caller_reads(self, frame: int, name: str) -> bool:
        """Whether the caller's variable ``name`` (of frame ``frame``, whose statement led down to the write) is read
        after the write: later in that statement, or later in its frame unless that statement binds ``name`` to
        what it computes (``a = block(a)``: later reads see the call's result, not what ``a`` held) and the frame
        reads none of its metadata after (``x.grad``: which tensor the call returned, not only its values)."""
        at = self.frames[frame]
        return (self.log.value_read(at, name, self.position) and not (
            self._rebound_by_the_call(frame, name) and not self.log.metadata_read(at, name, self.position))) \
            or self._read_after_the_call(frame, name)

    def _statement_of_the_call(self, frame: int) -> ast.AST | None:
        """The statement of frame ``frame`` running at this point: the one whose call led down to the write."""
        wanted = self.frames[frame]
        position = self.position - 1
        while position >= 0 and self.log.frames[position] != wanted:
            position -= 1
        return self.log.entries[position] if position >= 0 else None

    def _rebound_by_the_call(self, frame: int, name: str) -> bool:
        """That statement is a plain assignment whose targets include the variable ``name`` itself."""
        statement = self._statement_of_the_call(frame)
        return isinstance(statement, ast.Assign) and any(
            isinstance(n, ast.Name) and n.id == name for t in statement.targets
            for n in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else (t,)))

    def _read_after_the_call(self, frame: int, name: str) -> bool:
        """Whether the statement of frame ``frame`` running at this point (the one whose call led down to the
        write) may read ``name`` after that call returns: a load that some call of the statement ends before, a
        load in an assignment's target (evaluated after its value), or any load in a statement whose order its
        text does not show (a conditional expression, a comprehension, a lambda)."""
        statement = self._statement_of_the_call(frame)
        if not isinstance(statement, ast.stmt):
            return True
        loads = [load for load, metadata in _reads(statement) if not metadata and load.id == name]
        if not loads:
            return False
        parts = [n for root in _header(statement) for n in ast.walk(root)]
        if any(isinstance(n, (ast.IfExp, ast.comprehension, ast.Lambda, ast.NamedExpr)) for n in parts):
            return True
        targets = [t for t in (*getattr(statement, "targets", ()), getattr(statement, "target", None)) if t is not None]
        in_targets = {id(n) for t in targets for n in ast.walk(t)}
        ends = [(n.end_lineno, n.end_col_offset) for n in parts if isinstance(n, ast.Call)]
        return any(id(load) in in_targets or any(end <= (load.lineno, load.col_offset) for end in ends)
                   for load in loads)


@dataclass
class Report:
    """Why rebinding ``name`` at the write may not give the same program (empty lists: it does)."""

    name: str
    aliases_read_after: list[str] = field(default_factory=list)  # views / detached aliases read later
    holders_read_after: list[str] = field(default_factory=list)  # containers / objects read later
    escapes: list[str] = field(default_factory=list)  # attributes, unknown calls, the caller, closures

    @property
    def clean(self) -> bool:
        return not (self.aliases_read_after or self.holders_read_after or self.escapes)

    def besides(self, *escapes: str) -> bool:
        """Whether anything but ``escapes`` may make rebinding ``name`` give another program."""
        return bool(self.aliases_read_after or self.holders_read_after or set(self.escapes) - set(escapes))

    @property
    def only_holders(self) -> bool:
        """Nothing that is a view of the memory is read later: only containers, the caller, attributes."""
        return not self.aliases_read_after

    def reason(self) -> str:
        def names(items: list[str], one: str, many: str) -> str:
            unique = sorted(set(items))
            return "`" + "`, `".join(unique) + "` " + (one if len(unique) == 1 else many)

        parts = []
        if self.aliases_read_after:
            parts.append(names(self.aliases_read_after, "shares its memory and is read later",
                               "share its memory and are read later"))
        if self.holders_read_after:
            parts.append(names(self.holders_read_after, "may hold it and is read later", "may hold it and are read later"))
        parts.extend(sorted(set(self.escapes)))
        return "; ".join(parts)


def holders(envs: list[dict[str, Value]], scopes: tuple[dict[str, Value], ...], written: Tensor, memory: set[int]
            ) -> tuple[tuple[tuple[str, str, int | None], ...], tuple[tuple[str, object, int, int], ...]]:
    """(name, how, frame) of each variable that holds ``written``'s memory: "same" (the written tensor object
    itself: ``b = a``), "tensor" (another tensor over the same memory that is neither its view nor its base: a join
    of two paths, which may be the same object),
    "view" (a view or base of it, ``.data``, a NumPy view: detaching or rebinding it never meant to change those),
    "holder" (a list,
    dict or object that holds it).  ``envs``: each frame's variables, outermost first (frame: the index);
    ``scopes``: the enclosing and module variables the innermost frame sees (frame None; a name the frame
    shadows is its own).  A piece of a split other than the written one (``chunk``, ``unbind``) holds none of
    the written elements: it is not counted.  With them, ``Moment.places`` of the frames' variables."""
    chain = {id(t): place for place, t in enumerate(written.view_chain())}
    found: list[tuple[str, str, int | None]] = []
    places: list[tuple[str, object, int, int]] = []
    innermost = len(envs) - 1
    seen: set[str] = set()
    outer = [scope for scope in scopes if all(scope is not env for env in envs)]  # a caller's are its frame's
    held: dict[int, AbstractSet[int]] = {}  # by value: most are in several frames (a method's ``self``, a global)

    containers: dict[int, int | None] = {}  # id -> place (below 0) of each list or dict the written tensor is read out of

    def place_of(value: Value, depth: int = HELD_DEPTH) -> int | None:  # (``Moment.places``)
        if isinstance(value, Tensor):
            return chain.get(id(value))
        if not isinstance(value, (TensorSeq, TensorMap)) or depth == 0:
            return None
        if id(value) not in containers:
            containers[id(value)] = None
            if isinstance(value, TensorSeq) and value.base is not None and id(value.base) in chain \
                    or any(place_of(item, depth - 1) is not None for _, item in _items(value)):
                containers[id(value)] = -1 - len(containers)
        return containers[id(value)]

    def held_by(value: Value) -> AbstractSet[int]:
        storages = held.get(id(value))
        if storages is None:
            storages = held[id(value)] = storages_in(value)
        return storages

    for frame, variables in [*enumerate(envs), *((None, scope) for scope in outer)]:
        for name, value in variables.items():
            if frame is None or frame == innermost:
                if name in seen:
                    continue
                seen.add(name)
            if isinstance(value, Tensor):
                if value.storage.id in memory and (written.group or not disjoint(value, written)):
                    related = id(value) in chain or any(id(t) == id(written) for t in value.view_chain())
                    how = "same" if value is written else "view" if related else "tensor"
                    found.append((name, how, frame))
            elif memory & held_by(value):  # `t.data`, a NumPy view: the same memory under another name
                found.append((name, "view" if isinstance(value, (DataAlias, NumberFrom)) else "holder", frame))
            elif isinstance(value, TensorSeq) and value.base is not None and id(value.base) in chain:
                found.append((name, "holder", frame))  # the pieces of a split, one of which is written (or viewed)
            if frame is not None and (place := place_of(value)) is not None:
                places.append((name, None, frame, place))
                places += [(name, key, frame, at) for key, item in _items(value) if (at := place_of(item)) is not None]
    return tuple(found), tuple(places)


def _items(value: Value) -> list[tuple[object, Value]]:
    """(key, item) of a dict, or of a list whose items are each its own (not one standing for all)."""
    if isinstance(value, TensorMap):
        return list(value.items.items())
    return list(enumerate(value.items)) if isinstance(value, TensorSeq) and not value.uniform else []


def storages_in(value: Value | None, depth: int = HELD_DEPTH) -> AbstractSet[int]:
    """The storages of the tensors ``value`` is or holds (``HELD_DEPTH`` levels of lists, dicts, objects).  Not to
    be changed by the caller (one empty set answers for every value that holds none)."""
    how = _HOLDS.get(type(value)) or _case(type(value))
    if how is _NOTHING:
        return _NONE
    if how is Tensor or how is DataAlias or how is NumberFrom:
        return _leaf_storages(value, how) or _NONE
    found: set[int] = set()
    _add_held(value, how, depth, found)
    return found


def _leaf_storages(value: Value, how: object) -> set[int]:
    if how is Tensor:
        return {t.storage.id for t in (value.group or (value,))}
    if how is DataAlias:
        return {value.tensor.storage.id}
    return {value.array_of.storage.id} if value.array_of is not None else set()


def _add_held(holder: Value, how: object, depth: int, found: set[int]) -> None:
    """Add to ``found`` the storages of what the list, dict or object ``holder`` holds, ``depth`` levels down."""
    if depth == 0:
        return
    items = holder.items if how is TensorSeq else holder.items.values() if how is TensorMap else holder.attrs.values()
    for item in items:
        case = _HOLDS.get(type(item)) or _case(type(item))
        if case is _NOTHING:
            continue
        if case is Tensor or case is DataAlias or case is NumberFrom:
            found |= _leaf_storages(item, case)
        else:
            _add_held(item, case, depth - 1, found)


_NOTHING = object()  # a value that is no tensor and holds none
_NONE: frozenset[int] = frozenset()  # ``storages_in`` of a value that holds none
_HOLDS: dict[type, object] = {}  # type -> which of ``storages_in``'s cases it is, worked out once per type


def _case(kind: type) -> object:
    how = _HOLDS[kind] = _holds(kind)
    return how


def _holds(kind: type) -> object:
    for case in (Tensor, DataAlias, NumberFrom, TensorSeq, TensorMap, ModuleValue):
        if issubclass(kind, case):
            return case
    return _NOTHING


def _reads(entry: Entry) -> list[tuple[ast.Name, bool]]:
    """The names ``entry`` loads, each with whether the load reads only metadata (``x.shape``, ``x.grad``)."""
    if isinstance(entry, Skipped):
        roots: list[ast.AST] = list(entry.block)
        whole = True
    elif isinstance(entry, Repeats):
        return _exposed_reads(entry.loop)
    else:
        roots, whole = _header(entry), False
    return _loads(roots, whole)


def _loads(roots: list[ast.AST], whole: bool) -> list[tuple[ast.Name, bool]]:
    """The names loaded in ``roots``, each with whether the load reads only metadata; ``whole``: in the
    statements they hold too (else what runs of each node when it runs itself, ``_header``)."""
    found: list[tuple[ast.Name, bool]] = []
    stack: list[tuple[ast.AST, ast.AST | None]] = [(root, None) for root in roots]
    while stack:
        node, parent = stack.pop()
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                metadata = isinstance(parent, ast.Attribute) and parent.attr in NON_VALUE_ATTRS
                found.append((node, metadata))
            continue
        if isinstance(node, SCOPES):
            stack.extend((child, node) for child in _runs_here(node))
            continue
        if whole:
            stack.extend((child, node) for child in ast.iter_child_nodes(node))
        else:
            stack.extend((child, node) for child in _header(node))
    return found


_ASSIGNMENTS = (ast.Assign, ast.AnnAssign)


def _assigned(stmt: ast.stmt) -> list[str]:
    """The names a plain assignment binds (``a, *b = ...`` too; ``x: int`` without a value binds none)."""
    if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
        return []
    found, stack = [], list(getattr(stmt, "targets", None) or [stmt.target])
    while stack:
        target = stack.pop()
        if isinstance(target, ast.Name):
            found.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            stack.extend(target.elts)
        elif isinstance(target, ast.Starred):
            stack.append(target.value)
    return found


def _start(entry: Entry) -> tuple[int, int]:
    """Where the code an entry reads starts."""
    node = entry.block[0] if isinstance(entry, Skipped) else entry.loop if isinstance(entry, Repeats) else entry
    return node.lineno, node.col_offset


def carried_names(loop: ast.stmt) -> frozenset[str]:
    """The names a loop's iteration may read as the previous iteration left them (``_exposed_reads``): what a
    later run of the body gets from this one."""
    return syntax_fact(loop, "_gradguard_carried", lambda: frozenset(
        load.id for load, metadata in _exposed_reads(loop) if not metadata))


def _exposed_reads(loop: ast.stmt) -> list[tuple[ast.Name, bool]]:
    """``_reads`` of the statements of a loop's body (and a ``while``'s test) that may read a value bound before
    the iteration: not after an assignment to the name on every way there from the iteration's start (the
    ``for``'s target is bound first).  Assignments in nested blocks bind only inside them (a branch, a loop that
    may not run, a ``try`` left part-way)."""
    found = _loads([loop.test], True) if isinstance(loop, ast.While) else []
    pending = [(loop.body, frozenset(_targets(loop)))]
    while pending:
        block, before = pending.pop()
        bound = set(before)
        for stmt in block:
            found.extend((load, metadata) for load, metadata in _reads(stmt) if load.id not in bound)
            if not isinstance(stmt, SCOPES):
                now = frozenset(bound)
                pending.extend((b, now | _targets(stmt) if b is getattr(stmt, "body", None) else now)
                               for b in [b for _, b in blocks(stmt)] + [c.body for f in CLAUSE_FIELDS
                                                                        for c in getattr(stmt, f, ())])
            if type(stmt) in _ASSIGNMENTS:
                bound.update(_assigned(stmt))
    return found


def _targets(stmt: ast.stmt) -> frozenset[str]:
    """The names a ``for`` binds before each run of its body."""
    return frozenset(_assigned(ast.Assign([stmt.target]))) if isinstance(stmt, (ast.For, ast.AsyncFor)) \
        else frozenset()


def _header(node: ast.AST) -> list[ast.AST]:
    """What of ``node`` runs when it runs itself: everything but the statements it holds (they run, and are
    logged, on their own); of its clauses, the exception types, patterns and guards."""
    if not isinstance(node, (ast.stmt, ast.excepthandler, ast.match_case)):
        return list(ast.iter_child_nodes(node))
    parts: list[ast.AST] = []
    for field, value in ast.iter_fields(node):
        if field in CLAUSE_FIELDS:
            for clause in value:
                parts.extend(v for f, v in ast.iter_fields(clause) if f != "body" and isinstance(v, ast.AST))
        elif field in _NESTED_STATEMENTS and isinstance(value, list):
            continue
        elif isinstance(value, ast.AST):
            parts.append(value)
        elif isinstance(value, list):
            parts.extend(v for v in value if isinstance(v, ast.AST))
    return parts


def _runs_here(scope: ast.AST) -> list[ast.AST]:
    """What of a function, lambda or class definition runs where it is defined: decorators, defaults, bases."""
    parts: list[ast.AST] = list(getattr(scope, "decorator_list", ()))
    args = getattr(scope, "args", None)
    if isinstance(args, ast.arguments):
        parts.extend(args.defaults)
        parts.extend(d for d in args.kw_defaults if d is not None)
    if isinstance(scope, ast.ClassDef):
        parts.extend(scope.bases)
        parts.extend(k.value for k in scope.keywords)
    return parts
