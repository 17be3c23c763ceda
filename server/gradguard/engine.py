"""Run the tensor dataflow over every function of a module and turn its events into findings.

This is the whole pipeline between a parsed file and the rules:
units (functions, module top level) -> cheap candidate check -> ``Interpreter``
-> conflicts between writes and pending saves resolved against the graph's sinks
-> rules, in precedence order (an error torch raises at once hides later ones).
"""

from __future__ import annotations

import ast
import collections
import hashlib
import re
import sys
import weakref
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Iterator, NamedTuple

from .diagnostics import NOT_ANALYSED
from .inference.accumulation import sources_of, stale_steps
from .inference.loaded_copies import replaced_copies
from .inference.classes import ClassInfo, find_classes
from .inference.dtypes import file_default_dtype, forget_statements
from .inference.events import (CHAIN_REASON, Conflict, Finding, GradRead, MixedUse, Mutation, Sink, StaleUse,
                               in_function_of)
from .inference.imports import collect_imports
from .inference.interpreter import Context, Interpreter, TooManySteps
from .inference.jedi_oracle import JediOracle
from .inference.loss_hooks import unreturned_loss
from .inference.project import Project, calls_named, function_around
from .inference.scopes import module_bound, scope_names
from . import parsing, statements
from .inference.values import ModuleValue, copy_values
from .knowledge import load_knowledge
from .knowledge.names import RETURNED_LOSS_METHOD
from .messages import Message, other_file
from .moved import move_findings
from .rules import RULES_IN_PRECEDENCE



def analyze_module(tree: ast.Module, path: str, lines: list[str] | None = None, use_jedi: bool = True,
                   cache: dict | None = None, only_lines: tuple[int, ...] | None = None,
                   view_functions: tuple[str, ...] = (), with_fixes: bool = True, own_file: bool = False,
                   writes: dict[int, list[Mutation]] | None = None) -> list[Finding]:
    """Findings for one parsed file (``only_lines``: only of the functions around those lines, the module's own
    code included, for a fix that checks its own result).

    ``cache`` (the language server keeps one per document) maps a fingerprint of one function's own text to its
    findings and to what its analysis read (``_Reads``), so that a keystroke re-analyses only the functions it
    can affect.  It is
    rewritten in place to hold just this run's entries.  ``with_fixes=False``: the caller builds fixes on
    demand, so cached findings without a fix are moved too (``moved.py``), not analysed again.
    ``own_file``: a finding whose line to change is in another module of the project stays there, in that file
    (``_placed``); else it is reported at the call in this file that leads there (the editor's per-document view).
    ``writes``, when given, gets every in-place write the units' runs made (a finding's or not), by ``id`` of its
    node: what the runs knew there (``Mutation.moment``), for a write found otherwise (the probe's).  A finding's
    write carries the other units' runs of it (``_join_runs``).
    """
    knowledge = load_knowledge().with_views(view_functions)
    imports = collect_imports(tree.body)
    project_code = _imports_project_code(imports)
    oracle = JediOracle("\n".join(lines), path) if use_jedi and lines is not None and project_code else None
    functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    class_nodes: list[ast.ClassDef] = []
    units = list(_units(tree, class_nodes))
    classes = find_classes(class_nodes, imports, knowledge.autograd_function_bases)
    source = Path(path)
    # Only a file that imports something besides torch and the standard library can call into the project.
    project = (Project(source, knowledge.autograd_function_bases, entry_script=_is_entry_script(tree))
               if project_code and source.is_file() else None)
    default_dtype = file_default_dtype(tree, knowledge, "\n".join(lines) if lines is not None else None, lines)
    ctx = Context(knowledge, imports, classes, oracle=oracle, functions=functions, default_dtype=default_dtype,
                  path=str(source.resolve()) if project is not None else None, project=project,
                  training_units=frozenset(_training_units(units, tree, lines, _is_entry_script(tree),
                                                           _imported_trainers(project, imports, str(source))))
                  if project is not None else frozenset())
    if ctx.training_units and not _sets_grad_mode(tree, imports):
        ctx.grad_off_import = project.grad_off_on_import(imports, ctx.path)
    if cache and project is not None and not project.unchanged(cache.get(_PROJECT_MODULES, ())):
        cache.clear()  # a module of the project that a call was followed into has changed on disk
    words: dict = {}  # the words of each function's text that this version asked for, for the next edit
    if lines is None:
        candidates = None
    else:
        # training code that names what it imports from the project's modules may reach a write there
        project_names = ({name for name, q in imports.items() if project.holds(q, ctx.path)}
                         if ctx.training_units and _is_entry_script(tree) else set())
        candidates = _candidate_units(units, lines, ctx.training_units if project_names else (), project_names,
                                      words, cache.get(_WORDS) if cache else None)
    variables = _ModuleVariables(tree, lines)
    fingerprint = (_Fingerprints(tree, lines, functions, classes, variables,
                                 (*view_functions, f"dtype={default_dtype}"))
                   if cache is not None and lines is not None else None)
    module_env = _ModuleEnvironment(ctx, tree, lines, variables, fingerprint,
                                    cache.get(_PROTOTYPES) if cache else None)
    if fingerprint is not None:  # each function's locals, from the memo of the last edits' (``own_locals``)
        ctx.local_names.update((fn, fingerprint.locals_of(fn)) for fn, _ in units if fn is not None)
        module_env.reads = _Reads()  # what each unit's run looks up, for its cache entry
        ctx.functions = _Recorded(functions, module_env.reads)
        ctx.classes = _Recorded(classes, module_env.reads)
    used: dict[str, _Cached] = {}
    results: list[tuple[tuple[str, str], list[Finding]]] = []
    followed: set[tuple[str, str]] = set()
    places = _StatementPlaces(tree)
    ran = writes if writes is not None else {}
    for fn, owner in units:
        if candidates is not None and fn is not None and fn not in candidates:
            continue
        if only_lines is not None and not any(_at_top_level(tree, line) if fn is None
                                              else parsing.first_line(fn) <= line <= fn.end_lineno
                                              for line in only_lines):
            continue
        key, spans = (None, ()) if fingerprint is None else fingerprint.of(None, None) if fn is None else \
            fingerprint.own(fn, owner, _unit_flags(ctx, fn))
        produced, reads, read_key = None, None, ""
        hit = cache.get(key) if key is not None else None
        if hit is not None:
            reads, read_key = hit.reads, hit.read_key
            found_key, read_spans = _read_key(fingerprint, fn, owner, reads)
            if found_key == read_key:
                spans += read_spans
                produced = move_findings(hit.findings, hit.spans, spans, with_fixes)
                calls = hit.followed
        if produced is None:
            if key is not None:
                spans = spans[:2 if owner is not None else 1] if fn is not None else spans
                module_env.reads.start()
            try:
                interp = _run_unit(ctx, fn, owner, tree, module_env)
                for mutation in interp.mutations:
                    ran.setdefault(id(mutation.node), []).append(mutation)
                # A recursive call is not a caller that decides for the function.
                produced = _one_chain_one_finding(list(_check(interp, own_file)), places)
                calls = frozenset(interp.followed - {function_key(fn, owner)})
            except (TooManySteps, RecursionError) as exc:
                produced, calls = [_not_analysed(fn, tree, exc)], frozenset()
            finally:
                if key is not None:
                    reads = module_env.reads.stop(functions)
            if key is not None:
                read_key, read_spans = _read_key(fingerprint, fn, owner, reads)
                spans += read_spans
        if key is not None:
            used[key] = _Cached(spans, produced, calls, reads, read_key)
        followed |= calls
        results.append((function_key(fn, owner), produced))
    findings = _one_per_place(results, followed)
    for finding in findings:
        _join_runs(finding, ran)
    if cache is not None:
        cache.clear()
        cache.update(used)
        cache[_PROTOTYPES] = module_env.made
        cache[_WORDS] = words
        if project is not None:
            cache[_PROJECT_MODULES] = project.stamps()
    return findings


def _unit_flags(ctx: Context, fn: ast.AST) -> str:
    """What the engine decided for a function from the rest of the file and the project (part of its key)."""
    if ctx.project is None:
        return ""
    off = ctx.grad_off_import
    return (f"train={fn in ctx.training_units} entry={ctx.project.entry_script} "
            f"off={None if off is None else (getattr(off, 'lineno', 0), getattr(off, 'col_offset', 0))}")


def _read_key(fingerprint: "_Fingerprints", fn, owner, reads) -> tuple[str, tuple[tuple[int, int], ...]]:
    """The key of what a unit's run read, and the lines of its parts (see ``_Cached.reads``)."""
    if fn is None:
        return "", ()  # the module's own statements: their whole key is the entry's
    if reads is None:
        key, spans = fingerprint.of(fn, owner)
        return key, spans[2 if owner is not None else 1:]
    return fingerprint.of_reads(*reads)


_PROTOTYPES = "prototypes"  # the per-document cache's entry for _ModuleEnvironment.made (other keys: hex digests)
_WORDS = "words"  # the entry for ``_words`` of the functions' texts (``_candidate_units``)
_PROJECT_MODULES = "project modules"  # the entry for the stamps of the project's modules the analysis read


def without_findings(cache: dict, findings: list[Finding]) -> dict:
    """A copy of ``cache`` without the entries that hold any of ``findings``: a run with it analyses their
    functions again (a fix is built from a finding whose ``data`` is that of the text, not ``data_stale``)."""
    gone = {id(f) for f in findings}
    return {key: entry for key, entry in cache.items()
            if not (isinstance(entry, _Cached) and any(id(f) in gone for f in entry.findings))}


def _not_analysed(fn: ast.FunctionDef | None, tree: ast.Module, exc: Exception) -> Finding:
    """GG903 for a function (or the module's top level) whose analysis was abandoned: too many steps, or
    Python's recursion limit reached (each expression's depth is bounded by ``bounds``, but 99 levels of
    blocks around a call nested 100 deep, or calls followed into such code, can still get there).  Placed on
    the ``def`` and the name, not the whole body."""
    why = str(exc) if isinstance(exc, TooManySteps) else (
        "its analysis goes deeper than Python's recursion limit (blocks, expressions and the calls it follows, "
        "nested in one another)")
    if fn is None:
        first = next((s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom, ast.FunctionDef,
                                                                  ast.AsyncFunctionDef, ast.ClassDef))), tree.body[0])
        place = ast.Pass(lineno=first.lineno, col_offset=first.col_offset, end_lineno=first.lineno,
                         end_col_offset=first.col_offset)
        what = Message.format("the module's top level (its statements outside functions, from {line})", line=first)
    else:
        keyword = "async def " if isinstance(fn, ast.AsyncFunctionDef) else "def "
        place = ast.Pass(lineno=fn.lineno, col_offset=fn.col_offset, end_lineno=fn.lineno,
                         end_col_offset=fn.col_offset + len((keyword + fn.name).encode()))
        what = Message.format(f"the function `{fn.name}` on {{line}}", line=fn)
    message = Message.format("not analysed: {what} was skipped because {why}; the rest of the file was analysed",
                             what=what, why=why)
    return Finding(NOT_ANALYSED, place, message)


def _one_per_place(results: list[tuple[tuple[str, str], list[Finding]]],
                   followed: set[tuple[str, str]]) -> list[Finding]:
    """One finding per place, where several functions' analyses report the same write.

    An uncertain finding of a function the file itself calls stands only if a caller's analysis (made with
    the caller's real values) confirms it.  The kept one is the write's own function's, when it has one: its
    facts are local, so its fix edits where the finding is.  It becomes certain when a certain analysis tells
    the same story (the same saving ops); when it told another, the certain one is kept instead: the
    explanation must say what torch will do."""
    by_place: dict[tuple, list[tuple[tuple[str, str], Finding]]] = {}  # (file, code, line, column)
    merged: set[tuple] = set()  # the places of writes an analysis kept as related lines of an earlier write's finding
    for unit, produced in results:
        for finding in produced:
            by_place.setdefault((other_file(finding.node), *finding.place), []).append((unit, finding))
            merged.update((other_file(m.node), *m.place) for m in finding.merged)
    kept_findings = []
    for place, group in by_place.items():
        if all(not f.certain and unit in followed for unit, f in group):
            continue  # only guesses, and the file's own calls of the function do not bear them out
        if place in merged and all(unit in followed for unit, _ in group):
            continue  # the file's own calls of the function (which know what runs there) found it the same bug
        own = [f for _, f in group if f.mutation is None or not f.mutation.frames]
        certain = [f for _, f in group if f.certain]
        kept = own[0] if own else group[0][1]
        if not kept.certain and certain:
            if _saved_by(kept) <= _saved_by(certain[0]):  # the same story, now known to be true
                kept = replace(kept, certain=True)  # a copy: the cached finding stays as its own analysis made it
            else:
                kept = certain[0]  # the guess named another saving op than what the caller's values show
        kept.twins = [f for _, f in group if f is not kept]
        if any(f.certain and not _saved_by(f) <= _saved_by(kept) for f in kept.twins) and not kept.saves_elsewhere:
            kept = replace(kept, saves_elsewhere=True)  # a copy, as above
        kept_findings.append(kept)
    return kept_findings


def _join_runs(finding: Finding, ran: dict[int, list[Mutation]]) -> None:
    """The finding's write as every unit's run made it (``ran``: by ``id`` of the write's node), a finding's or not
    (``Moment.elsewhere``): a call of another function down to the write is a point of that function's run."""
    moment = finding.mutation.moment if finding.mutation is not None else None
    if moment is not None:
        logs = {id(moment.log): moment}
        for mutation in ran.get(id(finding.mutation.node), ()):
            if mutation.moment is not None:
                logs.setdefault(id(mutation.moment.log), mutation.moment)
        finding.mutation.moment = replace(moment, elsewhere=tuple(list(logs.values())[1:]))


# Rules whose finding sits on the write and whose story is "this tensor must not be written in place": a second
# write of the same tensor, for the same reason, is the same bug (the saved-tensor rules share one reason).
def _one_chain_one_finding(findings: list[Finding], places: _StatementPlaces) -> list[Finding]:
    """One finding per chain, where several writes break it in one story (of one function's analysis, before its
    findings are cached: a cached finding moved to new lines keeps what this made of it).

    A write that always runs before a second write of the same tensor, for the same reason (the same saves
    waiting, the same leaf, the same multi-view piece), is where torch's complaint starts: mending it (out of place,
    or a clone first) hands the second write another tensor.  The later write is kept as a related line of the
    first.  "Always runs before": the first is a statement of the block that holds the second (or a statement
    around it), earlier in it, in the same followed calls; a write inside a branch the second can run without is
    a bug of its own.  A write whose in-place activation overwrote what a forward hook kept is that hook's
    finding (GG005): its finding of an overwritten gradient ask (GG107) is the same bug, told again."""
    kept_writes = {id(f.data["kept_output"].write.node) for f in findings if "kept_output" in f.data}
    findings = [f for f in findings if not (f.code == "GG107" and id(f.node) in kept_writes)]
    later_of: dict[int, list[Finding]] = {}
    dropped: set[int] = set()
    _restaled(findings, later_of, dropped, places)
    keyed: dict[tuple, list[Finding]] = {}
    for f in findings:
        key = _chain_key(f) if id(f) not in dropped else None
        if key is not None:
            keyed.setdefault(key, []).append(f)
    for group in keyed.values():
        if len(group) < 2:
            continue
        # In source order, a write is merged into the earliest kept write whose simple statement comes before one
        # of the statements holding it, in the same block (linear in the group: one lookup per holding block).
        firsts: dict[int, tuple[int, Finding]] = {}  # id(block) -> (index, the earliest kept first written there)
        for second in sorted(group, key=lambda f: _position(f.node) or ()):
            holding = places.of(second.node)
            first = next((firsts[b][1] for b, i, _ in holding if b in firsts and firsts[b][0] < i), None)
            if first is not None:
                dropped.add(id(second))
                later_of.setdefault(id(first), []).append(second)
            elif holding and holding[-1][2]:
                firsts.setdefault(holding[-1][0], holding[-1][1:2] + (second,))
    out = []
    for f in findings:
        if id(f) in dropped:
            continue
        if id(f) in later_of:
            # (one line each: a loop's later runs of the write, or writes placed at one binding, are one line)
            again = {_position(s.node): s.node for s in later_of[id(f)] if _position(s.node) != _position(f.node)}
            f = replace(f, related=[*f.related, *((node, Message.text(
                "the same tensor is written in place again here, for the same reason")) for node in again.values())],
                        merged=later_of[id(f)])
        out.append(f)
    return out


def _restaled(findings: list[Finding], later_of: dict[int, list[Finding]], dropped: set[int],
              places: _StatementPlaces) -> None:
    """A write of saved tensors whose every conflicting save an earlier write, reported for a saved tensor too,
    already made stale (and runs wherever the save did: ``Mutation.staled_first``) writes the same saved version
    again: the earlier write is where torch's complaint starts, and mending it hands this one another tensor (a
    `+=` on a ReLU's output, then an in-place dropout of what the block returns).  It is kept as a related line of
    the first.  A save made after the first write is a story of its own, and keeps the later write's finding; so
    is a write in the same statement as the first (`torch.stack([y.mul_(2), y.mul_(3)])`: mending one leaves the
    other writing what was saved), or one whose statement is not known here (another file's)."""
    by_write = {id(f.mutation): f for f in findings
                if CHAIN_REASON.get(f.code) == "saved" and f.mutation is not None and f.mutation.kind == "write"}
    for f in findings:
        mutation = f.mutation
        if CHAIN_REASON.get(f.code) != "saved" or mutation is None or not mutation.staled_first \
                or not mutation.conflicts or any(c.save.id not in mutation.staled_first for c in mutation.conflicts):
            continue
        firsts = [by_write.get(id(mutation.staled_first[c.save.id])) for c in mutation.conflicts]
        if any(first is None or first is f or id(first) in dropped for first in firsts):
            continue
        held = places.of(mutation.node)
        if not held or any(not places.of(first.mutation.node)
                           or places.of(first.mutation.node)[-1][:2] == held[-1][:2] for first in firsts):
            continue
        first = min(firsts, key=lambda g: g.mutation.seq)
        dropped.add(id(f))
        later_of.setdefault(id(first), []).append(f)


def _chain_key(finding: Finding) -> tuple | None:
    """What a write finding is about: its reason, the written storage, the saves it conflicts with and the calls it
    runs inside (ids are unique across analyses, so findings of different analyses never share a key)."""
    reason = CHAIN_REASON.get(finding.code)
    mutation = finding.mutation
    if reason is None or mutation is None or finding.node is not mutation.node or mutation.kind != "write" \
            or other_file(finding.node) is not None:  # the statement places are the analysed file's
        return None
    # A leaf or a piece is refused whatever saved it; a saved tensor is the same story only for the same saves.
    saves = frozenset(c.save.id for c in mutation.conflicts) if reason == "saved" else frozenset()
    if reason == "saved" and not saves:
        return None
    return (reason, mutation.target.storage.id, saves, tuple(id(site) for site in mutation.call_path()))


class _StatementPlaces:
    """Where each node of one file's tree sits: (id of a statement list, index, whether that statement is simple) of
    every statement holding it, outermost first.  Keyed by position, since a finding kept from an earlier analysis
    holds the nodes of that analysis's tree; built once per file, on first use."""

    def __init__(self, tree: ast.Module):
        self._tree = tree
        self._places: dict[tuple, list[tuple[int, int, bool]]] | None = None

    def of(self, node: ast.AST) -> list[tuple[int, int, bool]]:
        if self._places is None:
            self._places = {}
            for _, _, block in statements.walk_blocks(self._tree):
                for index, stmt in enumerate(block):
                    simple = not statements.holds_statements(stmt)
                    for inner in ast.walk(stmt):
                        position = _position(inner)
                        if position is not None:
                            self._places.setdefault(position, []).append((id(block), index, simple))
        position = _position(node)
        return self._places.get(position, []) if position is not None else []


def _position(node: ast.AST) -> tuple[int, int, int, int] | None:
    if not hasattr(node, "lineno"):
        return None
    return (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)


def _saved_by(finding: Finding) -> set:
    """The ops a finding says saved the written tensor, by what and where in the function's own text they are (a
    finding kept from an earlier analysis holds the syntax nodes of that analysis's tree, so nodes cannot be
    compared)."""
    mutation = finding.mutation
    return {(c.save.op, c.save.role, getattr(c.save.node, "col_offset", None), ast.unparse(c.save.node))
            for c in getattr(mutation, "conflicts", ())}


def function_key(fn: ast.AST | None, owner: ast.ClassDef | None) -> tuple[str, str]:
    """A function named by its class and its name (the module's top level is ``("", "")``)."""
    return (owner.name if owner is not None else "", getattr(fn, "name", "") if fn is not None else "")


class _Cached(NamedTuple):
    spans: tuple[tuple[int, int], ...]  # the lines of each part of the fingerprint when the findings were made
    findings: list[Finding]
    followed: frozenset[tuple[str, str]]  # the file's functions its analysis followed calls into
    # A function's entry is found by its own key (``_Fingerprints.own``), then checked against what its run read
    # (``_Reads``): the module names it looked up, and of those the functions it ran.  None: the whole key.
    reads: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    read_key: str = ""


class _Reads:
    """What one unit's run looked up among the module's functions, classes and variables (``Recorded`` dicts as
    the context's ``functions`` and ``classes`` and as the module's variables), and which of the file's functions
    it began to run (``Interpreter.inline``, wrapped by ``watch``).

    The interpreter resolves a module name only through these dicts (``_expr_Name``, ``lookup``, ``classes_for``,
    ``class_of``), so a run whose lookups all find the same text again runs the same way: its key is its own text
    and the parts those names resolve to (``_Fingerprints.of_reads``), not every name its text and its helpers'
    texts mention.  A helper named but never run (``checkpoint_filter_fn`` handed to an imported builder) is
    read only as a function of that name and its header: its body was never looked at.  Anything that
    walks one of the dicts whole (``every``) falls back to the whole key."""

    def __init__(self) -> None:
        self.names: set[str] | None = None  # None: not recording (outside a unit's run)
        self.opened: set[int] = set()
        self.every = False

    def start(self) -> None:
        self.names, self.opened, self.every = set(), set(), False

    def stop(self, functions: dict) -> tuple[tuple[str, ...], frozenset[str]] | None:
        """The names looked up and, of those, the file's functions (``functions``) begun; None: read it all."""
        names, every = self.names, self.every
        self.names = None
        if every or names is None:
            return None
        # by lines: what runs may be made from the function (a ``@contextmanager``'s two parts, copied from it)
        return tuple(sorted(names)), frozenset(
            n for n in names if (f := functions.get(n)) is not None
            and any(parsing.first_line(f) <= line <= f.end_lineno for line in self.opened))

    def watch(self, interp: Interpreter) -> None:
        """Note every function of the file ``interp`` begins to run (a call followed, a hook, a context
        manager), also one it then refuses (too deep), by its line: only a function so begun may have been looked
        into.
        The interpreter is held weakly: a cycle through it would keep each unit's run until the collector ran."""
        inline, running = type(interp).inline, weakref.ref(interp)

        def watched(fn, *args, **kwargs):
            if self.names is not None:
                self.opened.add(getattr(fn, "lineno", 0))
            return inline(running(), fn, *args, **kwargs)

        interp.inline = watched


class _Recorded(dict):
    """A dict of module names that notes each name asked of it into ``_Reads`` (a walk of it: ``every``)."""

    def __init__(self, items: dict, reads: _Reads) -> None:
        super().__init__(items)
        self.reads = reads

    def _note(self, name) -> None:
        if self.reads.names is not None and isinstance(name, str):
            self.reads.names.add(name)

    def _all(self) -> None:
        if self.reads.names is not None:
            self.reads.every = True

    def __contains__(self, name) -> bool:
        self._note(name)
        return super().__contains__(name)

    def __getitem__(self, name):
        self._note(name)
        return super().__getitem__(name)

    def get(self, name, default=None):
        self._note(name)
        return super().get(name, default)

    def __iter__(self):
        self._all()
        return super().__iter__()

    def __len__(self) -> int:
        self._all()
        return super().__len__()

    def keys(self):
        self._all()
        return super().keys()

    def values(self):
        self._all()
        return super().values()

    def items(self):
        self._all()
        return super().items()

    def copy(self):
        self._all()
        return dict(super().items())

    def __or__(self, other):
        self._all()
        return dict(super().items()) | other

    def __reduce__(self):  # copy.copy, pickle
        self._all()
        return dict, (dict(super().items()),)


class _Fingerprints:
    """What one function's analysis can read: its own text (decorators included), the imports, its class, the
    file's functions and classes it names, and the top-level statements that bind the module variables it
    names (transitively, since calls are followed and a variable's value depends on others).

    "Names" are the names a piece of code can resolve outside itself (``scopes.free_names``): not a function's own
    locals (the interpreter never looks one up elsewhere), nor attribute names or strings.  A method reads its
    whole class's names (its other methods run as it calls them, and its ``__init__`` built ``self``).

    A function's key holds the parts' text but not where they are, and ``of`` also returns each part's lines:
    a function that only moved (or whose helpers moved) keeps its key, and its findings are moved part by part
    (``moved.py``) rather than made again.  The module's own statements are keyed with their absolute lines.

    A function's cache entry is found by ``own`` (its text, its class's, the imports and settings) and kept only
    if ``of_reads`` of the names its last run looked up gives the same key: ``of``, the closure of every name its
    text names, is the fallback when a run walked a dict of names whole."""

    def __init__(self, tree: ast.Module, lines: list[str], functions: dict, classes: dict,
                 variables: "_ModuleVariables", view_functions: tuple[str, ...] = ()):
        self.lines = lines
        self.texts: dict[ast.AST, str] = {}
        self.spans: dict[ast.AST, tuple[int, int]] = {}
        self.frees: dict[ast.AST, tuple] = {}  # a node: the names it reads outside itself, and its locals
        self.digests: dict[str, bytes] = {}  # a part's text: its digest (a helper is part of many keys)
        self.functions = functions
        self.read_parts: dict[tuple[str, bool], tuple] = {}  # ``_read_part``'s answers, for this version
        self.named: dict[str, list[ast.AST]] = {name: [node] for name, node in functions.items()}
        self.named.update({name: [info.node] for name, info in classes.items()})
        imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
        self.top = [s for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        self.variables = variables  # whether a function is given the module's variables
        # A module variable's value is made by every statement that can bind it (in a block, by a walrus), and by
        # the functions and classes that declare it ``global`` (their calls below then name it through them).
        self.binders: dict[str, list[ast.AST]] = {}
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and "global" not in self._text(stmt):
                continue
            for name in self._bound(stmt):
                self.binders.setdefault(name, []).append(stmt)
        # A module variable's value is also what the top level does to it without binding it (``t.requires_grad_()``,
        # ``cfg.update(...)``, a call of a function of the file that changes it): every top-level statement that
        # names it, itself or through the functions and classes it names, is part of it.
        changed: dict[str, list[ast.AST]] = {}
        for stmt in self.top:
            reach = self._free(stmt).union(*(self._free(node) for node, _ in self._named(self._free(stmt), self.named)))
            for name in reach & self.binders.keys():
                if stmt not in self.binders[name]:
                    changed.setdefault(name, []).append(stmt)
        values = {name: [*stmts, *changed.get(name, ())] for name, stmts in self.binders.items()}
        # what a function can name (once, not per function): a module variable is looked up before a function
        self.readable = {**values, **{n: [*values.get(n, ()), *nodes] for n, nodes in self.named.items()}}
        # Every key holds the imports and the settings that change what calls mean.
        self.imports = "|".join([*(self._text(s) for s in imports), *sorted(view_functions)])
        self.top_text = "\n".join(f"@{s.lineno}\n{self._text(s)}" for s in self.top)

    def _text(self, node: ast.AST) -> str:
        text = self.texts.get(node)  # a helper's text is read for each function that names it
        if text is None:
            text = self.texts[node] = "\n".join(self.lines[parsing.first_line(node) - 1 : node.end_lineno])
        return text

    def _span(self, node: ast.AST) -> tuple[int, int]:
        span = self.spans.get(node)  # as ``_text``: read for each function that names the node
        if span is None:
            span = self.spans[node] = (parsing.first_line(node), node.end_lineno)
        return span

    def _scope(self, node: ast.AST) -> tuple[frozenset[str], frozenset[str]]:
        """``scope_names`` of a node, kept across edits by its text and where in its lines it is (two statements
        may share a line)."""
        found = self.frees.get(node)
        if found is None:
            memo = (self._text(node), node.col_offset, node.end_col_offset, node.lineno - parsing.first_line(node))
            found = _SCOPE_NAMES.get(memo)
            if found is None:
                if len(_SCOPE_NAMES) > 8192:
                    _SCOPE_NAMES.clear()
                found = _SCOPE_NAMES[memo] = scope_names(node)
            self.frees[node] = found
        return found

    def _free(self, node: ast.AST) -> frozenset[str]:
        return self._scope(node)[0]

    def _bound(self, node: ast.AST) -> frozenset[str]:
        return _module_bound(node, self._text(node))

    def locals_of(self, fn: ast.AST) -> frozenset[str]:
        """A function's own locals (the interpreter's ``own_locals``), from the same memo."""
        return self._scope(fn)[1]

    def of(self, fn, owner) -> tuple[str, tuple[tuple[int, int], ...]]:
        """The key, and the (first, last) lines of each part it covers, in the key's order."""
        if fn is None:
            reads = frozenset().union(*(self._free(s) for s in self.top))
            named = [f"@{node.lineno}\n{text}" for node, text in self._named(reads, self.named)]
            return self._key([self.top_text, self.imports, *named]), ()
        own = self._text(fn)
        spans = [(parsing.first_line(fn), fn.end_lineno)]
        # whether the function is given the module's variables (``_ModuleEnvironment.for_function``)
        parts = [own, self.imports, "globals" if self.variables.reaches(fn) else ""]
        reads = self._free(fn)
        if owner is not None:
            parts.append(self._text(owner))
            spans.append((parsing.first_line(owner), owner.end_lineno))
            reads |= self._free(owner)
        for node, text in self._named(reads, self.readable):
            parts.append(text)
            spans.append(self._span(node))
        return self._key(parts), tuple(spans)

    def own(self, fn, owner, flags: str) -> tuple[str, tuple[tuple[int, int], ...]]:
        """A function's own key: its text, its class's, the imports and settings, whether it is given the module's
        variables, and ``flags`` (what the engine decided for it from the rest of the file); with their lines."""
        own = self._text(fn)
        parts = [own, self.imports, "globals" if self.variables.reaches(fn) else "", flags]
        spans = [(parsing.first_line(fn), fn.end_lineno)]
        if owner is not None:
            parts.append(self._text(owner))
            spans.append((parsing.first_line(owner), owner.end_lineno))
        return self._key(parts), tuple(spans)

    def of_reads(self, names: tuple[str, ...], opened: frozenset[str]) -> tuple[str, tuple[tuple[int, int], ...]]:
        """The key of what a run read (see ``_Reads``), from the names it looked up and the file's functions among
        them it began to run (``opened``), with the lines of each part.  A module variable reads the statements
        that bind it and everything they name, a class everything its body names (its bases, its methods'
        helpers: as ``of``); a function its own text when it ran, else only that it is a function of the file
        and its header."""
        marks, digests, spans = [], [], []
        for name in names:
            mark, parts, lines = self._read_part(name, name in opened)
            marks.append(f"{name}={mark}")
            digests += parts
            spans += lines
        return hashlib.blake2b("\n".join(marks).encode("utf-8", "surrogatepass") + b"".join(digests),
                               digest_size=16).hexdigest(), tuple(spans)

    def _read_part(self, name: str, ran: bool) -> tuple[str, list[bytes], list[tuple[int, int]]]:
        """What a run that looked ``name`` up read: a mark of what the name is, its parts' digests and lines (once
        per version of the file: the file's functions often read the same names, timm's ``vit_*``)."""
        found = self.read_parts.get((name, ran))
        if found is not None:
            return found
        parts, spans = [], []
        fn = self.functions.get(name)
        if fn is None:
            mark = "-"
        elif ran:
            mark = "f"
            parts.append(self._text(fn))
            spans.append(self._span(fn))
        else:  # named, never looked into: that it is a function of the file, its decorators and ``def``
            mark = "n" + "\n".join(self.lines[parsing.first_line(fn) - 1: fn.lineno])
            spans.append((parsing.first_line(fn), fn.lineno))  # a finding in its body cannot move
        if name in self.binders or (name in self.named and isinstance(self.named[name][0], ast.ClassDef)):
            mark += "+"
            for node, text in self._named(frozenset((name,)), self.readable):
                if not (ran and node is fn):
                    parts.append(text)
                    spans.append(self._span(node))
        found = self.read_parts[(name, ran)] = (mark, [self._digest(p) for p in parts], spans)
        return found

    def of_class(self, node: ast.ClassDef) -> str:
        """A key for what building an instance of the class reads: its bases and class-level statements, its
        ``__init__`` and the methods that names (transitively), and the file's functions and classes those name,
        each with its lines (the instance's values point at lines).  Its other methods are not part of it."""
        methods = {m.name: m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
        parts = [f"@{node.lineno}\n" + ",".join(ast.unparse(b) for b in node.bases)]
        parts += [f"@{n.lineno}\n{self._text(n)}" for n in node.body if n not in methods.values()]
        reads = frozenset().union(*(self._free(b) for b in node.bases),
                                  *(self._free(n) for n in node.body if n not in methods.values()))
        pending, read = ["__init__"], []
        while pending:
            method = methods.pop(pending.pop(), None)
            if method is not None:
                read.append(method)
                reads |= self._free(method)
                # methods are called through ``self.name``: an attribute's name is the word that counts here
                pending += sorted(_names(self._text(method)) & methods.keys())
        parts += [f"@{m.lineno}\n{self._text(m)}" for m in read]
        named = [f"@{n.lineno}\n{t}" for n, t in self._named(reads, self.named)]
        return self._key([*parts, self.imports, *named])

    def _named(self, reads: frozenset[str], named: dict[str, list[ast.AST]]) -> Iterator[tuple[ast.AST, str]]:
        """The parts (nodes of ``named``) that ``reads`` name, and those their own free names name, transitively."""
        seen: set[str] = set()
        given: set[int] = set()
        pending = [reads]
        while pending:
            for name in sorted(pending.pop() & named.keys()):
                if name in seen:
                    continue
                seen.add(name)
                for node in named[name]:
                    if id(node) in given:
                        continue
                    given.add(id(node))
                    pending.append(self._free(node))
                    yield node, self._text(node)

    def _key(self, parts: list[str]) -> str:
        """The digest of the parts' digests (each part's text is hashed once per run, not once per key)."""
        return hashlib.blake2b(b"".join(map(self._digest, parts)), digest_size=16).hexdigest()

    def _digest(self, part: str) -> bytes:
        digest = self.digests.get(part)
        if digest is None:
            digest = self.digests[part] = hashlib.blake2b(part.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        return digest


_SCOPE_NAMES: dict[tuple, tuple] = {}  # (a node's text, its place in it): its free names and locals, across edits


def _module_bound(node: ast.AST, text: str) -> frozenset[str]:
    """``scopes.module_bound`` of a top-level statement whose lines are ``text``, kept across edits (``_SCOPE_NAMES``):
    at each keystroke every unchanged top-level statement is asked again."""
    memo = ("bound", text, node.col_offset, node.end_col_offset, node.lineno - parsing.first_line(node))
    found = _SCOPE_NAMES.get(memo)
    if found is None:
        if len(_SCOPE_NAMES) > 8192:
            _SCOPE_NAMES.clear()
        found = _SCOPE_NAMES[memo] = module_bound(node)
    return found


@lru_cache(maxsize=8192)
def _names(text: str) -> frozenset[str]:
    """The identifiers in ``text``; memoised, since at every keystroke each unchanged function's text is read again."""
    return frozenset(re.findall(r"[A-Za-z_]\w*", text))


@lru_cache(maxsize=8192)
def _has_idiom(text: str) -> bool:
    return parsing.has_candidate(text)


def forget_texts() -> None:
    """Empty the memos of function texts (``_names``, ``_has_idiom``).  They serve the next versions of a document
    the editor analyses again; a batch analyses each file once, and over a corpus they held 49 MB (their keys
    are whole function texts, ``_names``' values a set of every identifier) for a hit rate under 10 %."""
    _names.cache_clear()
    _has_idiom.cache_clear()
    _SCOPE_NAMES.clear()
    forget_statements()  # file_default_dtype's answers by statement text


def _imports_project_code(imports: dict[str, str]) -> bool:
    """jedi is only worth starting when something is imported from outside torch and the standard library."""
    stdlib = sys.stdlib_module_names
    return any(q.split(".")[0] not in stdlib and not q.startswith(("torch", "numpy", "typing")) for q in imports.values())


def _at_top_level(tree: ast.Module, line: int) -> bool:
    """Whether ``line`` is in the module's own code (a call of a helper under ``if __name__ == "__main__":``),
    not in a function or class."""
    return any(parsing.first_line(st) <= line <= st.end_lineno for st in tree.body
               if not isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))


def _units(tree: ast.Module, class_nodes: list[ast.ClassDef] | None = None
           ) -> Iterator[tuple[ast.FunctionDef | None, ClassInfo | ast.ClassDef | None]]:
    """The module's top level, then every function and method (nested ones too), with its class.  Every class
    met on the way is added to ``class_nodes``, in source order (``find_classes`` then need not walk the tree
    again).  Source order is told by the top-level statement a class is in, then its line: line numbers
    compare only inside one top-level statement (``parsing.Layout``)."""
    yield None, None
    where: dict[int, tuple[int, int]] = {}  # class -> (its top-level statement, its line)
    stack: list[tuple[ast.AST, ast.ClassDef | None, int]] = [(tree, None, 0)]
    while stack:
        node, owner, top = stack.pop()
        for index, child in enumerate(statements.nested(node)):
            inside = index if node is tree else top
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield child, owner
                stack.append((child, None, inside))
            elif isinstance(child, ast.ClassDef):
                if class_nodes is not None:
                    class_nodes.append(child)
                    where[id(child)] = (inside, child.lineno)
                stack.append((child, child, inside))
            elif statements.holds_statements(child):
                stack.append((child, owner, inside))
    if class_nodes is not None:
        class_nodes.sort(key=lambda c: where[id(c)])


def _candidate_units(units, lines: list[str], training=(), project_names: set[str] = frozenset(),
                     words: dict | None = None, known: dict | None = None) -> set:
    """Functions whose text can hold a finding: an in-place idiom of their own, an inplace module of their
    class, a mention in training code (``training``) of a name imported from the project's modules
    (``project_names``: calls into them are followed there), or a way to reach a candidate: a call of it by name,
    or a mention of its class (``Step()(x)`` reaches ``Step.__call__``); and every method of a class whose
    ``__init__`` is a candidate (its attributes hold what the candidate made).  Repeated until nothing is added,
    so helpers of helpers count.  ``words`` gets the ``_words`` of each text it read, by text, and ``known`` (those
    of the last edit's run) answers for a text that did not change."""
    texts: dict[int, str] = {}
    words = {} if words is None else words
    known = known or {}

    def text(node) -> str:
        found = texts.get(id(node))
        if found is None:
            found = texts[id(node)] = "\n".join(lines[node.lineno - 1 : node.end_lineno])
        return found

    def words_of(node) -> tuple[set[str], set[str]]:
        source = text(node)
        found = words.get(source)
        if found is None:
            found = words[source] = known.get(source) or _words(source)
        return found

    candidates = set()
    for fn, owner in units:
        if fn is None:
            continue
        if _has_idiom(text(fn)) or (owner is not None and ("inplace" in text(owner) or fn.name == RETURNED_LOSS_METHOD)):
            candidates.add(fn)
        elif fn in training and not project_names.isdisjoint(words_of(fn)[1]):
            candidates.add(fn)
    while True:
        functions = {fn.name for fn in candidates}
        classes = {owner.name for fn, owner in units if fn in candidates and owner is not None}
        initialised = {owner for fn, owner in units if fn in candidates and owner is not None and fn.name == "__init__"}
        # A function reaches a candidate when its text calls one by name (``\bname\s*\(``) or mentions its
        # class (``\bClass\b``): read from the words of its text, not a regex of every name, compiled anew.
        added = {fn for fn, owner in units if fn is not None and fn not in candidates
                 and (owner in initialised or _reaches(words_of(fn), functions, classes))}
        if not added:
            return candidates
        candidates |= added


def _reaches(words: tuple[set[str], set[str]], functions: set[str], classes: set[str]) -> bool:
    called, every = words
    return not functions.isdisjoint(called) or not classes.isdisjoint(every)


_CALLED = re.compile(r"\b(\w+)\s*\(")


def _words(text: str) -> tuple[set[str], set[str]]:
    r"""The whole words of ``text`` followed by a ``(`` (``\bname\s*\(`` matches exactly these), and all its
    whole words (``\bname\b``).  Kept from one edit to the next for the document's functions only (``_WORDS``):
    memoised for the last 8,192 functions of any file, they held 20 MiB.  Interned: a word is one string however
    many functions hold it."""
    intern = sys.intern
    return set(map(intern, _CALLED.findall(text))), set(map(intern, re.findall(r"\w+", text)))


class _ModuleEnvironment:
    """What functions of the module share: its variables as the top level leaves them (``model = Net()`` read
    by ``def train():``), and each class's instance as its ``__init__`` leaves it (``self`` of its methods).

    Each is made once, lazily, and every function gets its own copy, so that one function's analysis cannot
    change what another one sees.  With a per-document cache they are kept across edits (``made``), keyed by the
    text and lines they read, so that a keystroke in a method does not run a model's whole construction again."""

    def __init__(self, ctx: Context, tree: ast.Module, lines: list[str] | None, variables: "_ModuleVariables",
                 fingerprint: "_Fingerprints | None" = None, previous: dict | None = None):
        self.ctx = ctx
        self.statements = [s for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                         ast.ClassDef))]
        self.variables = variables
        self.lines = lines
        self.fingerprint = fingerprint
        self.previous = previous or {}
        self.made: dict[str, object] = {}  # key -> prototype, for the next edit
        self.reads: _Reads | None = None  # with a cache: what each unit's run looks up

    def top_level(self) -> list[ast.stmt]:
        return self.statements

    def instance(self, info: ClassInfo, fresh: bool, follows: bool = False) -> ModuleValue:
        """``self`` for a method's analysis: as the class's ``__init__`` leaves it (``fresh``: as it enters it).
        Writes made in ``__init__`` are reported by ``__init__``'s own analysis.  ``follows``: the method is
        training code, and so is the ``__init__`` that builds it (its calls into the project are followed)."""
        if fresh:
            return Interpreter(self.ctx).instantiate(info, [], {}, None, record=False, run_init=False)
        key = self.fingerprint.of_class(info.node) if self.fingerprint is not None else f"class {info.name}"

        def make():
            interp = Interpreter(self.ctx)
            interp.follows_modules = follows
            return interp.instantiate(info, [], {}, None, record=False)

        made = self._prototype(f"{key} following" if follows else key, make)
        # built apart from the code that builds it: its parameters' dtypes are not known
        return copy_values({"self": made}, untyped=True)["self"]

    def trains(self, fn: ast.AST) -> bool | None:
        """Does the function run a backward, a step or ``autograd.grad`` itself?  Read from its text."""
        if self.lines is None:
            return None
        return bool(_TRAINS.search("\n".join(self.lines[fn.lineno - 1: fn.end_lineno])))

    def for_function(self, fn: ast.AST) -> dict | None:
        if self.lines is None or not self.variables.reaches(fn):
            return None
        key = self.fingerprint.of(None, None)[0] if self.fingerprint is not None else "module"
        made = copy_values(self._prototype(key, self._run_top_level))
        return made if self.reads is None else _Recorded(made, self.reads)

    def _run_top_level(self) -> dict:
        interp = Interpreter(self.ctx)
        interp.inline_record = False
        interp.run_module(self.statements)
        return interp.state.env

    def _prototype(self, key: str, make):
        if key not in self.made:
            self.made[key] = self.previous[key] if key in self.previous else make()
        return self.made[key]


_BACKWARD_WORD = re.compile(r"(?:backward|grad)\b")  # at a word's start: ``parsing.word_starts``
_TRAINS = re.compile(r"\.\s*(?:backward|step|grad)\b")


class _ModuleVariables:
    """Which functions are given the module's variables: those whose text names one, or names a function or class
    of the file that does, on down (``run()`` builds ``Trainer()``, whose ``__init__`` calls ``build_head(CONFIG)``).
    One answer for the analysis (``_ModuleEnvironment.for_function``) and for the cache key (``_Fingerprints``), so
    that an entry cannot outlive a change to what its function was given."""

    def __init__(self, tree: ast.Module, lines: list[str] | None):
        self.lines = lines
        self.tree = tree
        self.names: frozenset[str] | None = None  # worked out once, when a function first asks
        self.readers: frozenset[str] | None = None  # likewise

    def _text(self, node: ast.AST) -> str:
        return "\n".join(self.lines[parsing.first_line(node) - 1: node.end_lineno])

    def reaches(self, fn: ast.AST) -> bool:
        if self.lines is None:
            return False
        if self.names is None:
            # a variable bound anywhere in a top-level statement's blocks (``for``/``with`` bodies, a walrus, ...)
            self.names = frozenset().union(*(_module_bound(s, self._text(s)) for s in self.tree.body
                                             if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))))
        if not self.names:
            return False
        own = _names(self._text(fn))
        return bool(self.names & own or self._readers() & own)

    def _readers(self) -> frozenset[str]:
        """The file's functions and classes that read a module variable, directly or through the ones they name:
        from each direct reader along a map of who names whom, so each name is visited once (linear in the file)."""
        if self.readers is None:
            # a definition is a statement: walking the statements finds every one, nested ones too
            defs = [(node.name, _names(self._text(node))) for node in statements.walk(self.tree)
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
            def_names = {name for name, _ in defs}
            named_by: dict[str, list[str]] = {}
            for name, words in defs:
                for word in words & def_names:
                    named_by.setdefault(word, []).append(name)
            pending = [name for name, words in defs if self.names & words]
            readers = set(pending)
            while pending:
                for name in named_by.get(pending.pop(), ()):
                    if name not in readers:
                        readers.add(name)
                        pending.append(name)
            self.readers = frozenset(readers)
        return self.readers


def _run_unit(ctx: Context, fn: ast.FunctionDef | None, owner: ast.ClassDef | None, tree: ast.Module,
              module_env: _ModuleEnvironment) -> Interpreter:
    if fn is not None and any(isinstance(s, (ast.Import, ast.ImportFrom)) for s in fn.body):
        ctx = replace(ctx, imports=collect_imports(fn.body, dict(ctx.imports)))
    info = ctx.classes.get(owner.name) if owner is not None else None
    if info is not None and info.node is not owner:
        info = None  # a class redefined later under the same name
    interp = Interpreter(ctx)
    if module_env.reads is not None:
        module_env.reads.watch(interp)
    interp.follows_modules = fn in ctx.training_units
    if ctx.grad_off_import is not None:  # an import switched grad mode off for the whole process
        interp.state.grad_enabled, interp.grad_off_site = False, (ctx.grad_off_import, None)
    if fn is None:
        interp.run_module(module_env.top_level())
        return interp
    globals_ = module_env.for_function(fn)
    if globals_ is not None:
        interp.scopes = [globals_]
    if info is not None:
        interp.self_value = module_env.instance(info, fresh=fn.name == "__init__",
                                                follows=interp.follows_modules and ctx.project.entry_script)
    interp.run_function(fn, is_forward=info is not None and info.is_module and fn.name == "forward", owner=info,
                        trains=module_env.trains(fn))
    unreturned = unreturned_loss(interp, fn, info)
    if unreturned is not None:
        interp.unreturned.append(unreturned)
    return interp


def _check(interp: Interpreter, own_file: bool = False) -> Iterator[Finding]:
    # Writes through a second name (`out = x`) are the binding's finding when they assemble a tensor in it (two
    # indexed writes or more): one write is mended where it is.
    through = collections.Counter(binding for binding, _ in {(id(m.alias_site[0]), id(m.node))
                                                             for m in interp.mutations if m.alias_site is not None})
    for mutation in interp.mutations:
        if mutation.alias_site is not None and through[id(mutation.alias_site[0])] < 2:
            mutation.alias_site = None
    # Likewise writes through a name bound to a view of a leaf: two or more make the view the line to change.
    via_view = collections.Counter(site for site, _ in {(id(m.view_site), id(m.node))
                                                        for m in interp.mutations if m.view_site is not None})
    for mutation in interp.mutations:
        if mutation.view_site is not None and via_view[id(mutation.view_site)] < 2:
            mutation.view_site = None
    for mutation in interp.mutations:
        mutation.conflicts = _conflicts(interp, mutation)
        mutation.after_backward = any(s.kind == "backward" and s.seq < mutation.seq for s in interp.sinks)
        if mutation.conflicts and mutation.after_backward and interp.stale:
            mutation.stale_use, mutation.stale_conflict = _stale_use(interp, mutation)
            mutation.stale_carried = (mutation.stale_use is not None
                                      and mutation.stale_conflict.save.id not in _backwarded(interp, mutation))
            if mutation.stale_use is not None and not mutation.stale_carried:
                mutation.stale_detach = _late_detach(interp, mutation)
            if mutation.stale_use is not None:
                mutation.stale_kept = _kept_read(interp, mutation)
        if mutation.conflicts and mutation.after_backward and mutation.stale_use is None:
            mutation.early_forward = _early_forward(interp, mutation)
        if mutation.kind == "step" and mutation.conflicts and mutation.after_backward:
            mutation.touched_after = _touched_after(interp, mutation)
        if not mutation.conflicts and mutation.pending and interp.stale:
            mutation.mixed = _mixed_use(interp, mutation)
        mutation.read_after = _read_after(interp, mutation)
        if mutation.sign_marker is not None:
            mutation.sign_reached = next((s for s in interp.sinks if s.kind == "backward" and s.seq > mutation.seq
                                          and mutation.sign_marker in s.graph), None)
        mutation.asks = _asks_answered_by_new_value(interp, mutation)
    for graph_break in interp.breaks:
        if graph_break.cut:
            graph_break.reached, graph_break.starved = _starved_by(interp, graph_break)
            if graph_break.grad_off is not None:
                graph_break.starved = _starved_by_grad_off(interp, graph_break)
            if graph_break.starved is None and graph_break.dead_in is None:
                graph_break.term_starved = _term_starved(interp, graph_break)
            if graph_break.kept_in_part is not None and graph_break.reached is None and interp.is_forward:
                graph_break.reached = next((s for s in interp.sinks if s.kind == "return"
                                            and graph_break.marker in s.graph), None)
        else:
            graph_break.reached = _lost_at(interp, graph_break)
    for rebind in interp.rebinds:
        rebind.reached, rebind.starved = _rebind_starves(interp, rebind)
    for replaced in interp.replaced:
        new = (interp.parameter_sources(replaced.new) if isinstance(replaced.new, ModuleValue)
               else replaced.new.graph)
        # An optimizer whose parameter groups were written after the replacement may hold the new parameters: the
        # one that held the old (or one sharing its parameters), or one given the new ones.
        old = replaced.optimizer.held
        if new and not any(o.held & new or o.regrouped > replaced.seq and (o.held & old or o.regrouped_with & new)
                           for o in interp.optimizers):
            replaced.reached = next((s for s in interp.sinks if s.kind == "backward" and s.seq > replaced.seq
                                     and s.graph & new), None)
        if replaced.reached is not None:
            # The optimizer goes on being used after the replacement: a step of it, or a zero_grad() of it before
            # that backward (a helper that clears and backpropagates, whose caller steps later or returns it).
            replaced.use = next((s.node for s in interp.step_runs
                                 if s.optimizer is replaced.optimizer and s.seq > replaced.seq), None)
            if replaced.use is None and not any(owner is replaced.optimizer and replaced.seq < seq
                                                < replaced.reached.seq for seq, owner, *_ in interp.grad_clears):
                replaced.reached = None
    for made in interp.copies:
        _copy_trained(interp, made)
    for flag in interp.flags:
        sources = interp.parameter_sources(flag.module)
        flag.reached = next((s for s in interp.sinks if s.kind == "backward" and s.seq > flag.seq
                             and s.graph & sources), None)
        if flag.reached is not None:
            flag.updated = next((r for r in interp.grad_reads if r.updates and r.seq > flag.reached.seq
                                 and r.sources & sources), None)
    for unfreeze in interp.guarded_unfreezes:
        unfreeze.reached = next((s for s in interp.sinks if s.kind == "backward" and s.seq > unfreeze.seq), None)
    found: list[tuple[Finding, object]] = []
    for event in [*interp.mutations, *interp.breaks, *interp.hook_writes, *interp.rebinds, *interp.flags,
                  *interp.guarded_unfreezes,
                  *interp.replaced, *(c for c in interp.copies if c.reached is not None), *interp.discarded,
                  *interp.grad_off_backwards, *interp.unreturned,
                  *interp.numpy_refused, *stale_steps(interp), *replaced_copies(interp)]:
        for rule in RULES_IN_PRECEDENCE:
            produced = list(rule.check(event))
            if produced:
                found.extend((f, event) for f in produced)
                break
    found = _fold_mended_updates(interp, found)
    # A loop runs an update more than once: when one run's finding is placed at the stale value's use, the
    # others' findings at the update itself are the same bug.
    placed = {id(event.node) for f, event in found if isinstance(event, Mutation) and f.node is not event.node
              and f.code == "GG101"}
    # A helper's update run for each of several losses (one call per critic) may each find the failing loss computed
    # too early, at the critics' forwards: one write, one finding (the first).
    early: set[int] = set()
    for f, event in found:
        if f.code == "GG101" and f.node is not event.node and getattr(event, "early_forward", None) is not None \
                and event.stale_use is None:
            if id(event.node) in early:
                continue
            early.add(id(event.node))
        if not (f.code == "GG101" and f.node is event.node and id(event.node) in placed):
            finding = _placed(f, event) if own_file else _in_this_file(f, event)
            if finding is not None:
                yield finding


def _fold_mended_updates(interp: Interpreter, found: list) -> list:
    """Updates in a row (one optimizer per network) that break one backward: when one update's finding is placed at
    the line to change (the use of a value computed before it and shared with the backward before it), another
    update's finding at its own line is dropped when that backward reaches the other's stale weights through that
    same line too (in the function that runs the update): computing the value again there mends both.  The
    dropped update becomes a related location of the kept finding."""
    placed: dict[tuple[int, int], int] = {}
    for k, (f, event) in enumerate(found):
        if (f.code == "GG101" and isinstance(event, Mutation) and f.node is not event.node
                and event.stale_use is not None and event.stale_kept is None and event.stale_detach is None
                and not event.stale_carried):
            placed.setdefault((id(event.stale_conflict.sink.node), id(f.node)), k)
    if not placed:
        return found
    folded: dict[int, list] = {}
    for k, (f, event) in enumerate(found):
        if f.code != "GG101" or not isinstance(event, Mutation) or f.node is not event.node:
            continue
        # Every conflict's save is reached through a use at the kept finding's line (one such finding for all).
        path = event.call_path()
        targets = set()
        for c in event.conflicts:
            keys = {(id(c.sink.node), id(in_function_of(u.path, u.node, path))) for u in interp.stale_uses
                    if event.seq <= u.seq < c.sink.seq and u.marker in c.sink.graph and c.save.id in u.inputs}
            targets.add(next((placed[key] for key in keys if key in placed), None))
        into = targets.pop() if len(targets) == 1 else None
        if into is not None and into != k and found[into][1].node is not event.node:
            folded.setdefault(into, []).append(event)
    if not folded:
        return found
    dropped = {id(e) for events in folded.values() for e in events}
    out = []
    for k, (f, event) in enumerate(found):
        if id(event) in dropped and f.node is event.node:
            continue
        if k in folded:
            seen = {id(n) for n, _ in f.related}
            notes = [(e.node, Message.format("{how} updates weights this graph saved too; computing the value again "
                                             "here mends it as well", how=e.how))
                     for e in folded[k] if id(e.node) not in seen and not seen.add(id(e.node))]
            f = replace(f, related=[*f.related, *notes])
        out.append((f, event))
    return out


def _copy_trained(interp: Interpreter, made) -> None:
    """A deep copy trained with the original's optimizer: a later step of an optimizer that holds the original's
    parameters and none of the copy's, after a backward that reaches the copy's parameters, while no backward of the
    run reaches any parameter that optimizer holds, no optimizer holds the copy's and the code writes no gradient
    itself (then the step never applies the copy's gradients, and nothing the run does trains the copy)."""
    original, copied = interp.parameter_sources(made.original), interp.parameter_sources(made.copy)
    if not original or not copied or interp.grads_written or not _deliveries_known(interp) or any(o.held & copied or o.regrouped
                                                                 for o in interp.optimizers):
        return
    backwards = [s for s in interp.sinks if s.kind == "backward"]
    for optimizer, step, seq in interp.optimizer_steps:
        held = optimizer.held
        if seq < made.seq or not held & original or any(s.graph & held for s in backwards):
            continue
        reached = next((s for s in reversed(backwards) if made.seq < s.seq < seq and s.graph & copied), None)
        if reached is not None:
            made.optimizer, made.step, made.reached = optimizer, step, reached
            return


def _sets_grad_mode(tree: ast.Module, imports: dict[str, str]) -> bool:
    """Whether the file's text names a grad-mode switch or context anywhere (``set_grad_enabled``, ``enable_grad``,
    ``no_grad``, ``inference_mode``): a mode an imported module set may then be set again, and no claim is made."""
    return any(isinstance(n, (ast.Attribute, ast.Name)) and (n.attr if isinstance(n, ast.Attribute) else n.id) in (
        "set_grad_enabled", "enable_grad", "no_grad", "inference_mode") for n in statements.every_node(tree))


def _is_entry_script(tree: ast.Module) -> bool:
    """A program's own script (a top-level ``if __name__ == "__main__":``), not a library's module: its model
    classes and its training code are followed into the project's modules (a library's every trainer method
    following its package would cost more than its analysis, and its step budget)."""
    return any(statements.is_main_guard(s) for s in tree.body)


def _imported_trainers(project: Project | None, imports: dict[str, str], path: str) -> frozenset[str]:
    """The names an entry script imports from the project's modules that are training functions there (they run
    a backward, or call by name a function of their module that does): ``main()`` that builds the model and hands
    it to ``prune_then_finetune(model, ...)`` of ``finetune.py`` is training code too.  Read only for a program's
    script (``project.entry_script``): a library's modules do not follow each other's trainers."""
    if project is None or not project.entry_script:
        return frozenset()
    found = set()
    for name, qualname in imports.items():
        if not project.holds(qualname, path):
            continue
        definition = project.definition(qualname, path)
        if not isinstance(definition, tuple):
            continue
        function, module_path = definition
        module = project.module(module_path)
        if module is not None and function.name in _module_trainers(module):
            found.add(name)
    return frozenset(found)


def _module_trainers(module) -> frozenset[str]:
    """The names of a project module's top-level functions that are training code (``_training_units``), found
    once per reading of the module."""
    if module.trainers is None:
        functions = [(f, None) for f in module.tree.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
        module.trainers = frozenset(f.name for f in _training_units(functions, module.tree) if f is not None)
    return module.trainers


def _training_units(units, tree: ast.Module, lines: list[str] | None = None, entry_script: bool = False,
                    imported: frozenset[str] = frozenset()) -> set:
    """The units (functions, and the module's top level as ``None``) that run a backward (``.backward()``,
    ``torch.autograd.grad``), or call by name a function of the file that does, or one of the project's that
    does (``imported``, see ``_imported_trainers``): training code, whose calls into the project's other modules
    are followed (``main()`` builds the model that ``train(model)`` trains).
    Empty when the tree's text (``lines``) has no word ``backward`` nor ``grad`` (most files) and it imports no
    training function: a call of either needs one (in ASCII text, where the parser does not normalise
    identifiers), and the tree is not walked."""
    if lines is not None and not imported:
        text = "\n".join(lines)
        if text.isascii() and not parsing.word_starts(_BACKWARD_WORD, text):
            return set()
    calls: dict = {fn: set() for fn, _owner in units}
    training = set()
    # One walk of the tree: each call counts for every unit around it (a function's walk holds its nested
    # functions' calls; the top level's, those of its statements outside functions and classes).
    own = {id(fn) for fn in calls if fn is not None}
    top = (None,) if None in calls else ()
    stack = [(s, () if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else top)
             for s in tree.body]
    while stack:
        node, around = stack.pop()
        if id(node) in own:
            around = (*around, node)
        elif around and isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                if func.attr in ("backward", "grad"):
                    training.update(around)
                for fn in around:
                    calls[fn].add(func.attr)
            elif isinstance(func, ast.Name):
                for fn in around:
                    calls[fn].add(func.id)
        for field in statements.node_fields(type(node)):  # past the ``ctx`` markers: a third of the nodes
            value = getattr(node, field, None)
            if isinstance(value, list):
                stack += [(item, around) for item in value if isinstance(item, ast.AST)]
            elif isinstance(value, ast.AST):
                stack.append((value, around))
    while True:
        trainers = {fn.name for fn in training if fn is not None} | imported
        added = {fn for fn, names in calls.items() if fn not in training and names & trainers}
        if not added:
            break
        training |= added
    # In an entry script, the methods of its classes that training code builds (the model `main()` makes and
    # `fit(model)` trains), and of the classes those methods build in turn, run in training too: their calls into
    # the project's modules are followed (a layer imported from one, whose forward writes what its base saved).
    if not entry_script:
        return training
    owners = {fn: owner.name for fn, owner in units if fn is not None and owner is not None}
    built = set().union(*(calls[fn] for fn in training))
    while True:
        added = {fn for fn, name in owners.items() if fn not in training and name in built}
        if not added:
            return training
        training |= added
        built = built.union(*(calls[fn] for fn in added))


def _placed(finding: Finding, event) -> Finding:
    """A finding at the line the user must change, in that line's own file (the CLI's and the analysis API's
    placement; the editor's per-document view keeps ``_in_this_file``'s).

    The line is the finding's own (the write, or the line its rule chose: the op that read a state by reference),
    also when it is in another module of the project, except for one shape: a write in a helper that does nothing
    but that write (its body, inside any ``with`` blocks and but for a docstring and a ``return`` of a name, an
    attribute or nothing, is the one simple statement) and that the project calls from more than one place (a
    framework's ``Variable.assign``, whose ``copy_`` is the point of calling it: changing it would change every
    caller) is not what to change, the call is: the finding moves to the call site that runs the helper, and on
    up while that call is itself such a helper's only statement.  A helper with one call is part of its caller's
    code, and its write is changed where it is (``layer.state.copy_(v)`` -> ``layer.state = v``).  The followed calls (the analysed file's call site and
    the frames between) are related locations.  A finding in another file gets its fix in that file (``Fixer``:
    built there with that module's text, and checked by analysing this file again with the fixed text read for it)."""
    if other_file(finding.node) is None:
        return finding
    frames = [site for site, _ in getattr(event, "frames", ())]
    node, related = finding.node, list(finding.related)
    if node is getattr(event, "node", None):
        depth = len(frames)
        while depth and _only_statement_of_helper(node):
            depth -= 1
            node = frames[depth]
        if node is not finding.node:
            related.insert(0, (finding.node, Message.format(
                "the write, in a helper that only makes it: its call on {site} is the line to change", site=node)))
            frames = frames[:depth]
    known = {id(n) for n, _ in related}
    related += [(site, Message.format("`{callee}` is called here; {line} runs inside it", callee=_called(site),
                                      line=node)) for site in frames if id(site) not in known]
    moved = replace(finding, node=node, related=related)
    # At the write: fixed there.  At a call of a helper that only makes it: no fix knows how to change that call.
    moved.fix_memo = None if node is finding.node else (None,)
    return moved


def _called(site: ast.AST) -> str:
    call = site if isinstance(site, ast.Call) else next((n for n in ast.walk(site) if isinstance(n, ast.Call)), None)
    return f"{ast.unparse(call.func)}()" if call is not None else ast.unparse(site).split("\n")[0][:40]


def _only_statement_of_helper(node: ast.AST) -> bool:
    """Whether ``node`` is in another module's function whose one statement holds it (``_placed``'s helper shape)."""
    path = other_file(node)
    fn = function_around(node, path) if path is not None else None
    if fn is None:
        return False
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if body and isinstance(body[-1], ast.Return) and (body[-1].value is None or
                                                      isinstance(body[-1].value, (ast.Name, ast.Attribute))):
        body = body[:-1]
    while len(body) == 1 and isinstance(body[0], (ast.With, ast.AsyncWith)):
        body = body[0].body
    if len(body) != 1 or not isinstance(body[0], (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign)):
        return False  # a branch or a loop around the write decides something: the helper is more than the write
    line = getattr(node, "lineno", 0)
    return body[0].lineno <= line <= (body[0].end_lineno or body[0].lineno) and calls_named(fn.name) > 1


def _in_this_file(finding: Finding, event) -> Finding | None:
    """A finding whose line is in another module of the project (a write inside a followed call into it) is
    reported at the call in this file that leads there, with the write as a related location and the fix of the
    finding at its own line (``Finding.placed``: it edits that file); None when no such call is known."""
    if other_file(finding.node) is None:
        return finding
    site = next((s for s, _ in reversed(getattr(event, "frames", ())) if other_file(s) is None), None)
    if site is None:
        return None
    where = "the write" if finding.node is getattr(event, "node", None) else "this finding's own line"
    moved = replace(finding, node=site, related=[(finding.node, Message.text(f"{where}, inside this call")),
                                                 *finding.related])
    own = _placed(finding, event)  # the CLI's finding: fixed in its own file when it stays at its own line
    moved.placed = own if own.node is finding.node else None
    moved.fix_memo = None if moved.placed is not None else (None,)
    return moved


def _read_after(interp: Interpreter, mutation) -> Sink | None:
    """The first backward after a write autograd did not record that reads the changed tensor; in a forward, its
    return (the caller trains through it)."""
    reads = [s for s in interp.sinks if s.seq > mutation.seq and mutation.hidden_marker in s.graph]
    return next((s for s in reads if s.kind == "backward"),
                next((s for s in reads if s.kind == "return" and interp.is_forward), None))


def _asks_answered_by_new_value(interp: Interpreter, mutation: Mutation) -> list:
    """Where the written tensor's own gradient is asked for and autograd answers for the value after the write:
    a ``retain_grad()`` before it (torch moves it to the new version), a hook or ``autograd.grad(inputs=...)``
    after it when the old value was already read (that use's gradient is left out)."""
    if mutation.kind != "write" or not mutation.grad_enabled:
        return []
    storages = {t.storage.id for t in (mutation.target.group or (mutation.target,))}
    return [ask for ask in interp.asks if ask.storage in storages and (
        ask.seq < mutation.seq if ask.how == "retain_grad" else ask.seq > mutation.seq and mutation.read_before)]


def _lost_at(interp: Interpreter, graph_break) -> Sink | None:
    """The first backward (or forward's return) that the value read out of a tensor that requires grad reaches:
    that term of the loss gets no gradient, whatever other paths the loss has (torch decides: the fixtures
    show the gradients differ)."""
    for sink in interp.sinks:
        if graph_break.marker not in sink.graph:
            continue
        if sink.kind == "backward" and graph_break.kept_marker in sink.graph:
            return None  # the tensor read out reaches it with its graph too: its numbers are a constant (a target)
        # A helper that returns numbers read out of a tensor may mean it; a forward's output is differentiated.
        if sink.kind == "backward" or (sink.kind == "return" and interp.is_forward and graph_break.certain):
            return sink
    return None


def _deliveries_known(interp: Interpreter, after: int = -1) -> bool:
    """Whether the backwards (those after ``after``) are known to reach only what their graphs hold: none ran from a
    value the analysis does not know, and none of their graphs holds an op on one (which may carry any history).
    A claim that no backward reaches a parameter is made only then."""
    return not interp.unknown_backward and not any(
        s.graph & interp.opaque_markers for s in interp.sinks if s.kind == "backward" and s.seq > after)


def _starved_by(interp: Interpreter, cut) -> tuple[Sink | None, GradRead | None]:
    """A ``.detach()`` that reaches a backward, and the first place that uses gradients of what it cut off which
    no backward of the function delivers (an optimizer over an encoder that only feeds the detached value).
    A cut whose sources get their gradient along another path, or that nothing asks for, is meant."""
    sink = next((s for s in interp.sinks if s.kind == "backward" and cut.marker in s.graph), None)
    if sink is None:
        return None, None
    if not _deliveries_known(interp):
        return sink, None
    delivered = frozenset().union(*(s.graph for s in interp.sinks if s.kind == "backward"))
    for read in interp.grad_reads:
        if (read.sources & cut.sources) - delivered:
            return sink, read
    return sink, None


def _starved_by_grad_off(interp: Interpreter, cut) -> GradRead | None:
    """The first update using gradients of parameters a value made with grad mode off was computed from, which no
    backward delivers.  A value computed so keeps the ids of what it was computed from in its graph, so what a
    backward delivers is read from its loss's terms that carry a gradient (the dead term is not one of them)."""
    if not _deliveries_known(interp):
        return None
    delivered = frozenset().union(*(g for s in interp.sinks if s.kind == "backward"
                                    for g in (s.terms or (s.graph,))))
    return next((r for r in interp.grad_reads if r.seq > cut.reached.seq and (r.sources & cut.sources) - delivered),
                None) if cut.reached is not None else None


def _term_starved(interp: Interpreter, cut) -> tuple[Sink, GradRead] | None:
    """A backward of a sum whose term built on the cut value reaches none of the parameters that the updates of
    its gradients (the steps before the next backward, or looks at gradients an optimizer holds) change, while another term reaches those of the cut
    value's sources (the generator's loss scoring ``D(fake.detach())`` beside an L1 term, stepped by the
    generator's optimizer alone): that term was meant to train them and gives them no gradient."""
    for sink in interp.sinks:
        if sink.kind != "backward" or cut.marker not in sink.graph or len(sink.terms) < 2:
            continue
        term = next((t for t in sink.terms if cut.marker in t), None)
        if term is None or term & interp.opaque_markers:
            continue  # (a term built on a value not known may reach any parameter)
        following = min((s.seq for s in interp.sinks if s.kind == "backward" and s.seq > sink.seq), default=None)
        updates = [r for r in interp.grad_reads if (r.updates or r.held_by is not None) and r.seq > sink.seq
                   and (following is None or r.seq < following)]
        if any(r.sources & term for r in updates):
            continue  # the term trains what another update of these gradients steps
        read = next((r for r in updates if r.sources & cut.sources
                     and any(r.sources & t for t in sink.terms if t is not term)), None)
        if read is not None:
            return sink, read
    return None


def _rebind_starves(interp: Interpreter, rebind) -> tuple[Sink | None, GradRead | None]:
    """The first backward through a tensor rebound under no_grad, and the first read after it of a gradient that
    never arrives: the new tensor's own ``.grad``, or the old leaf's (an optimizer's step) when no backward since
    the rebinding reached it.  A rebinding no backward runs through (after the last one), or whose gradient
    nothing reads, is left alone."""
    sink = next((s for s in interp.sinks if s.kind == "backward" and s.seq > rebind.seq and rebind.marker in s.graph),
                None)
    if sink is None:
        return None, None
    for read in interp.grad_reads:
        if read.seq < sink.seq:
            continue
        delivered = frozenset().union(*(s.graph for s in interp.sinks
                                        if s.kind == "backward" and rebind.seq < s.seq < read.seq))
        if rebind.marker in read.sources or ((read.sources & rebind.sources) - delivered
                                             and _deliveries_known(interp, rebind.seq)):
            return sink, read
    return sink, None


def _stale_use(interp: Interpreter, mutation: Mutation) -> tuple[StaleUse | None, Conflict | None]:
    """For an update of parameters between backwards: the first op after it on a value made stale by one of its
    conflicting saves, whose result the backward that raises runs through; and that save's conflict.  The value
    is one a backward before the update already ran through (a value both losses share), or one the loop
    carries into its next iteration (the use comes before the update in the loop's code: `state` of the next
    step's action, computed before this step's update)."""
    backwarded = _backwarded(interp, mutation)
    detached = _detached_before(interp, mutation)
    # The latest saves first: a value made since an earlier update of the same weights is the one this update
    # makes stale (an older one was already stale, and an earlier update's finding names its use).
    for c in sorted(mutation.conflicts, key=lambda c: -c.save.id):
        if c.sink.kind != "backward":
            continue
        use = next((u for u in interp.stale_uses if mutation.seq <= u.seq < c.sink.seq
                    and u.marker in c.sink.graph and c.save.id in u.inputs and not detached(u)), None)
        if use is not None and (c.save.id in backwarded or _carried(use, mutation)):
            return use, c
    return None, None


def _detached_before(interp: Interpreter, mutation: Mutation):
    """Whether a stale use builds only on a value the code took `.detach()`ed before the update (a target the loss
    the update applies reads detached, and a later loss reads with its graph), which no backward before the update
    ran through itself: it is not a value both losses share, and computing it again at the use is not the change
    (the update comes before the backward of the loss that reads the value with its graph)."""
    before = [s.graph for s in interp.sinks if s.kind == "backward" and s.seq < mutation.seq]
    taken = [d for d in interp.detaches if d.marker and d.seq < mutation.seq and not any(d.marker in g for g in before)]
    markers = frozenset(u.marker for u in interp.stale_uses) | frozenset(d.marker for d in interp.detaches)

    def detached(use: StaleUse) -> bool:
        inputs = use.inputs - markers
        return bool(inputs) and any(d.marker in use.inputs and inputs <= d.graph for d in taken)
    return detached


def _early_forward(interp: Interpreter, mutation: Mutation) -> Conflict | None:
    """A conflict of an update whose failing loss was computed too early: its save was made before the backward
    whose gradients the update applies (the last backward before it, which reaches the updated parameters), no
    backward before the update ran through it, and the first update after the failing backward changes none of
    these parameters (that loss trains others).  Only when that backward and the update run inside one call the
    forward's function makes (a helper that backpropagates a loss and steps): that function cannot move the step
    alone, and the forward it computed too early is what to compute after the call (unless the failing backward
    runs in that call too: the order inside it is then what to change)."""
    params = frozenset().union(*(t.graph for t in (mutation.target.group or (mutation.target,)) if t.param))
    before = [s for s in interp.sinks if s.kind == "backward" and s.seq < mutation.seq]
    if not params or not before or not before[-1].graph & params:
        return None
    applied, path = before[-1], mutation.call_path()
    early = []
    for c in mutation.conflicts:
        if c.sink.kind != "backward" or c.save.id >= applied.mark or any(c.save.id in s.graph for s in before):
            continue
        common = 0
        while common < min(len(path), len(c.save.path)) and path[common] is c.save.path[common]:
            common += 1
        if common >= len(path) or len(applied.path) <= common or applied.path[common] is not path[common]:
            continue  # the update is not in a call that also runs the backward it applies
        if len(c.sink.path) > common and c.sink.path[common] is path[common]:
            continue  # that call runs the failing backward too: the order inside it is what to change
        following = next((r for r in interp.grad_reads if r.updates and r.seq > c.sink.seq), None)
        if following is not None and not following.sources & params:
            early.append(c)
    return max(early, key=lambda c: (c.save.certain, -c.save.id), default=None)


def _touched_after(interp: Interpreter, mutation: Mutation) -> list[tuple[ast.AST, tuple[ast.AST, ...], bool]] | None:
    """What ran after an optimizer step and may touch the gradients of its parameters or the weights it updated
    (``Mutation.touched_after``): every clear and step (touching them when it reaches them), reads of them,
    backwards other than the ones the step breaks that reach them, saves of the updated weights (a forward).  Up to
    the step's next run (a loop's next iteration), whose own story starts there."""
    if interp.grads_written or interp.unknown_backward:
        return None
    sources = frozenset().union(*(t.graph for t in (mutation.target.group or (mutation.target,)) if t.param))
    broken = {id(c.sink) for c in mutation.conflicts}
    end = next((r.seq for r in interp.step_runs if r.node is mutation.node and r.seq > mutation.seq), interp.seq + 1)

    def runs_before_next(seq: int) -> bool:
        return mutation.seq < seq < end

    touched = [(node, path, owner is None or bool(sources_of(interp, [owner]) & sources))
               for seq, owner, node, path in interp.grad_clears if runs_before_next(seq)]
    touched += [(r.node, r.path, bool(r.sources & sources)) for r in interp.grad_reads if runs_before_next(r.seq)]
    touched += [(s.node, s.path, True) for s in interp.sinks if runs_before_next(s.seq) and s.kind == "backward"
                and id(s) not in broken and s.graph & sources]
    # The weights the step wrote, at the version they had before it: a save at a later one was made after it.
    before: dict[int, int] = {}
    for save in mutation.pending:
        if save.role == "weight":
            before[save.storage.id] = max(before.get(save.storage.id, save.version), save.version)
    touched += [(s.node, s.path, True) for s in interp.saves.on(before) if s.version > before[s.storage.id]]
    return touched


def _mixed_use(interp: Interpreter, mutation: Mutation) -> MixedUse | None:
    """An update of parameters whose stale graph no backward reaches, when the first op after it that takes a value
    computed through those parameters before it (a save it made stale) also takes one computed through them after
    it (a save of the updated weights), and that op's result reaches a later backward only through a `.detach()`
    (a TD error `td_target - critic(s)` taken after the critic's step, as the actor's weight): nothing raises, but
    the value mixes the weights before and after the update."""
    stale = {s.id: s for s in mutation.pending if s.role == "weight"}
    if not stale:
        return None
    old = {}
    for s in stale.values():
        old[s.storage.id] = max(old.get(s.storage.id, s.version), s.version)
    fresh = frozenset(s.id for s in interp.saves if s.role == "weight" and s.storage.id in old
                      and s.version > old[s.storage.id])
    if not fresh:
        return None
    later = [s for s in interp.sinks if s.kind == "backward" and s.seq > mutation.seq]
    for use in interp.stale_uses:
        if use.seq < mutation.seq or use.inputs.isdisjoint(stale) or use.inputs.isdisjoint(fresh):
            continue
        if any(use.marker in s.graph for s in later):
            return None  # a backward runs through it: it raises, and another finding says so
        for cut in interp.breaks:
            if cut.cut and use.marker in cut.sources:
                sink = next((s for s in later if cut.marker in s.graph), None)
                if sink is not None:
                    return MixedUse(use, next(stale[i] for i in sorted(use.inputs & stale.keys())), cut.node, sink)
        return None
    return None


def _kept_read(interp: Interpreter, mutation: Mutation):
    """The read, between the update and the stale use, of a value an object kept in an attribute from before the
    update, whose graph holds the conflicting save, when the loop carries it into its next iteration (the use comes
    before the update in the loop's code): the object keeps it across steps (a cache filled once, a value prepared
    before the loop).  A value kept on the object to pass it from one method to the next within one step (a
    forward's outputs read by the losses) is not: the use after the update is the line to change there; nor is a
    state the same assignment keeps anew on each call after the update (a recurrent state kept on the module),
    which is meant to be carried and is cut where each step begins."""
    use, save = mutation.stale_use, mutation.stale_conflict.save
    if not _carried(use, mutation):
        return None
    read = next((r for r in interp.kept_reads if mutation.seq <= r.seq <= use.seq and save.id in r.graph
                 and r.graph <= use.inputs), None)
    if read is None or any(stmt is read.store and seq >= mutation.seq for stmt, seq in interp.kept_stores):
        return None
    return read


def _late_detach(interp: Interpreter, mutation: Mutation):
    """The first detach of the stale state after the failing backward, when the update ran again before it (the
    loop that updates goes on without it: it runs in an outer loop, or after the loop)."""
    conflict = mutation.stale_conflict
    detach = next((d for d in interp.detaches if d.seq > conflict.sink.seq and conflict.save.id in d.graph), None)
    if detach is None or not any(m.node is mutation.node and mutation.seq < m.seq < detach.seq
                                 for m in interp.mutations):
        return None
    return detach


def _backwarded(interp: Interpreter, mutation: Mutation) -> frozenset[int]:
    """The conflicting saves of an update that a backward before it already ran through."""
    before = [s for s in interp.sinks if s.kind == "backward" and s.seq < mutation.seq]
    return frozenset(c.save.id for c in mutation.conflicts if any(c.save.id in s.graph for s in before))


def _carried(use: StaleUse, mutation: Mutation) -> bool:
    """The use runs after the update but comes before it in the code of the function that runs both (or leads to
    both, through its calls): the loop around them carries the value it builds on into its next iteration."""
    update_path = mutation.call_path()
    common = 0
    while common < len(use.path) and common < len(update_path) and use.path[common] is update_path[common]:
        common += 1
    at = use.path[common] if common < len(use.path) else use.node
    update = update_path[common] if common < len(update_path) else mutation.node
    return other_file(at) is None and other_file(update) is None and at.lineno < update.lineno


def _conflicts(interp: Interpreter, mutation: Mutation) -> list[Conflict]:
    """Pending saves this write invalidates whose graph really reaches a backward (or leaves the function)."""
    conflicts = []
    for save in mutation.pending:
        candidates = [s for s in interp.sinks if save.id in s.graph and s.seq > mutation.seq]
        if candidates:
            # Prefer the backward that will raise; otherwise where the graph leaves the function.
            rank = {"backward": 0, "compiled": 1, "return": 2, "escape": 3}
            conflicts.append(Conflict(save, min(candidates, key=lambda s: (rank[s.kind], s.seq))))
    return conflicts
