"""Fixes for the findings only the runtime probe made (``check --probe``: no static finding matched them).

The probe says which line to change and why: the rule's code, the line that writes, the op and line that saved,
the related lines its notes name.  This module turns those facts, and the syntax at exactly those lines, into
the typed ``Finding`` (with its ``Mutation`` for a write) that the rule's own fix builder reads, and asks that
builder through the fix layer's ``Fixer`` -- nothing is inferred here that the probe did not see.  The fixes
then reach users as every other fix does: on the diagnostic (JSON, SARIF), through the planner for ``--fix`` and
``--diff``.

Each shape below is offered only because torch proved its fixes on the probe-only fixtures and real cases
(``bench/probe_fixes.py``, ``tests/fixes/test_probe_fix_proof.py``): a probe finding of another shape gets none.
Fixes that would need the static analysis to check their result (``FixContext.still_found``) are not built: the
static analysis never saw these findings, so it cannot say they are gone -- except GG101's, checked against the
expressions the probe saw save the weights (``_saves_still_before``).
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from . import parsing, statements
from .api import FIX_BUILDERS
from .autofix.build import Fixer
from .diagnostics import FileResult, Fix, TextEdit
from .engine import analyze_module
from .fixes import FindingId, StillFound, unavailable
from .fixes.context import CannotFix, FixContext
from .fixes.moves import move_statements_after
from .inference.events import Conflict, Finding, Mutation, Sink
from .inference.stale_optimizers import built_just_before
from .inference.values import Grad, ModuleValue, Save, Storage, Tensor
from .knowledge.names import ALLOCATIONS, CONVERSIONS, LEAF_IDENTITY_ATTRS, PIECES, TENSOR_NAMES
from .probe.merge import (ALIAS_NOTE, BACKWARD_CALL_NOTE, BUFFER_READ_NOTE, FROZE_NOTE, GRAD_OFF_NOTE,
                          GUARD_SKIPS_OTHERS_NOTE, INPUT_NOTE, LEAF_ROWS_NOTE, MULTI_VIEW_NOTE, OWN_STATS_BIASED_NOTE,
                          OWN_STATS_NOTES, OWN_STATS_UNBIASED_NOTE, PLACED, REBUILT_NOTE, RENORM_NOTE, REPLACED_NOTE, REPLACING_CALL_NOTE, RETURNED_LOSS_NOTE, SETTER_NOTE,
                          STALE_USE_NOTE, STEP_CALL_NOTE, STEP_NOTE, VIEW_NOTE, ProbedDiagnostic)
from .probe.model import ProbeFinding, Site
from .rules.gg001_saved_tensor_mutated import saves_by_call
from .rules.gg103_graph_break import build_optimizer_after
from .statements import blocks, chain_base, is_dotted
from .text import code_point_column

log = logging.getLogger(__name__)


class _Lines:
    """The statements of one parsed file by the lines they start or lie on."""

    def __init__(self, tree: ast.Module):
        self.tree = tree

    def statements_at(self, line: int) -> list[ast.stmt]:
        """The statements that contain ``line``, innermost last."""
        return sorted((n for n in ast.walk(self.tree) if isinstance(n, ast.stmt)
                       and parsing.first_line(n) <= line <= (n.end_lineno or n.lineno)),
                      key=lambda n: (n.lineno, -(n.end_lineno or n.lineno)))

    def function_of(self, stmt: ast.stmt) -> ast.AST:
        """The innermost function around ``stmt`` (the module at its top level)."""
        around = [n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.lineno <= stmt.lineno and stmt.end_lineno <= n.end_lineno]
        return max(around, key=lambda n: n.lineno) if around else self.tree

    def grad_off_around(self, line: int) -> bool:
        """Whether ``line`` is written inside a block or function that switches grad mode off (``with
        torch.no_grad():``, ``@torch.inference_mode()``, ``set_grad_enabled(...)``), as far as its syntax says."""
        def switches(node: ast.expr) -> bool:
            func = node.func if isinstance(node, ast.Call) else node
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            return name in ("no_grad", "inference_mode", "set_grad_enabled")

        for stmt in self.statements_at(line):
            if isinstance(stmt, (ast.With, ast.AsyncWith)) and any(switches(i.context_expr) for i in stmt.items):
                return True
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(map(switches, stmt.decorator_list)):
                return True
        return False

    def simple_statement_at(self, line: int) -> ast.stmt | None:
        """The one simple statement (no body) on ``line``, or None when there are none or several."""
        simple = [s for s in self.statements_at(line) if not hasattr(s, "body") and s.lineno == line]
        return simple[0] if len(simple) == 1 else None

    def simple_statement_around(self, line: int) -> ast.stmt | None:
        """The one simple statement (no body) that ``line`` lies in, on its first line or a later one (an
        expression the probe places on a continuation line of a statement written over several)."""
        simple = [s for s in self.statements_at(line) if not hasattr(s, "body")]
        return simple[0] if len(simple) == 1 else None


def _note(finding: ProbeFinding, message: str) -> Site | None:
    """The site of the finding's note ``message``, when it is in the finding's own file."""
    return next((n.site for n in finding.notes if n.message == message and n.site.path == finding.site.path), None)


# --- the shapes: each builds the Finding a rule's fix reads, from the probe's facts and the lines' syntax -------------

def _flag(lines: _Lines, f: ProbeFinding) -> Finding | None:
    """GG103 ``module.requires_grad = False`` (a plain attribute on a module): the static finding's ``flag``."""
    stmt = lines.simple_statement_at(f.site.line)
    if f.code == "GG103" and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
            and isinstance(stmt.targets[0], ast.Attribute) and stmt.targets[0].attr == "requires_grad":
        return Finding("GG103", stmt, "", data={"flag": True})
    return None


def _cut(lines: _Lines, f: ProbeFinding) -> Finding | None:
    """A ``t.detach()``/``t.data`` whose result lost the gradient the probe saw missing: GG103 whose result fed a
    backward that left trained parameters without a gradient (``starved``), or GG102 placed at the cut of a copy
    whose rest keeps the cut values (values with a history written into part of it).  The static GG103 finding's
    ``cut``, at the one such node of the line's assigned value; its rule's fix lets the gradient through."""
    if not (f.code == "GG103" and f.kind == "starved" or f.code == "GG102"):
        return None
    stmt = lines.simple_statement_at(f.site.line)
    if stmt is None or f.code == "GG102" and (not isinstance(stmt, ast.Assign) or _the_write(lines, f.site.line)):
        return None
    cuts = [n for n in ast.walk(stmt.value if isinstance(stmt, ast.Assign) else stmt) if _is_cut(n)]
    if len(cuts) != 1:
        return None
    # The probe names the first cut the values went through: another one in the same function may cut them again,
    # and letting the gradient through the first alone would leave the parameters as starved (a real case did).
    # A new Parameter set on an attribute is the last cut its values go through in the function (the attribute
    # holds them): other statements setting new Parameters cut other values.
    if sum(1 for n in ast.walk(lines.function_of(stmt)) if _is_cut(n)
           and not (_new_parameter(n) and _new_parameter(cuts[0]) and n is not cuts[0])) != 1:
        return None
    return Finding("GG103", cuts[0], "", data={"cut": True})


def _is_cut(node: ast.AST) -> bool:
    """``t.detach()``, a read of ``t.data``, or ``nn.Parameter(t)`` (a new leaf on ``t``'s data)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "detach"
            and not node.args and not node.keywords
            or isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.ctx, ast.Load)
            or _new_parameter(node))


def _new_parameter(node: ast.AST) -> bool:
    """``Parameter(...)`` or ``<module>.Parameter(...)`` by its spelling (the rule's fix checks what it names)."""
    return isinstance(node, ast.Call) and (isinstance(node.func, ast.Name) and node.func.id == "Parameter"
                                           or isinstance(node.func, ast.Attribute) and node.func.attr == "Parameter")


def _rebuild(lines: _Lines, f: ProbeFinding) -> Finding | None:
    """GG103 values read out of the graph and made a tensor again: the statement that rebuilds them (the
    finding's own line, or the rebuild its note names when the probe placed it at the read)."""
    if f.code != "GG103" or f.kind != "graph-break" or _detach_refused_on_view(f):
        return None  # (a `.detach_()` torch refused on a view rebuilds nothing: ``_detach_refused``)
    stmt = lines.simple_statement_at(f.site.line)
    if stmt is None:
        return None
    rebuilt = _note(f, REBUILT_NOTE)
    if rebuilt is None:
        return Finding("GG103", stmt, "")
    at = lines.simple_statement_at(rebuilt.line)
    return Finding("GG103", stmt, "", data={"rebuilt_at": at}) if at is not None else None


def _view_binding(lines: _Lines, f: ProbeFinding) -> Finding | None:
    """GG003 writes through a name bound to a view of a leaf, placed at the binding: the static ``view_site``."""
    if f.code != "GG003" or _note(f, VIEW_NOTE) is None:
        return None
    stmt = lines.simple_statement_at(f.site.line)
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return Finding("GG003", stmt, "", data={"view_site": True})
    return None


def _receiver(node: ast.expr) -> ast.expr:
    """``x`` of ``x.float().contiguous()``: the tensor a chain of method calls starts from."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    return node


def _copy_at_binding(lines: _Lines, f: ProbeFinding) -> Finding | None:
    """GG001 placed at a binding whose name the write goes through: a second name of a saved tensor (``out = x``
    ... ``out[i] = v``), or a custom Function's conversion that returned its input itself (``x = x.float()``
    ... ``x -= m``).  The static finding at the binding (``Mutation.alias_site``): a copy taken there."""
    write = _note(f, ALIAS_NOTE) or _note(f, INPUT_NOTE)
    if f.code != "GG001" or write is None:
        return None
    binding = lines.simple_statement_at(f.site.line)
    written = lines.simple_statement_at(write.line)
    if not (isinstance(binding, ast.Assign) and len(binding.targets) == 1 and isinstance(binding.targets[0], ast.Name)
            and written is not None):
        return None
    other = _receiver(binding.value)
    if not isinstance(other, (ast.Name, ast.Attribute)) or other is not binding.value and write == _note(f, ALIAS_NOTE):
        return None
    name = binding.targets[0].id
    # The probe saw the write change memory a graph saved, with grad mode on (it raised or changed gradients).
    mutation = Mutation(written, Tensor(Storage(), Grad.YES, leaf=False), "", True, 0,
                        alias_site=(binding, name, ast.unparse(other)))
    return Finding("GG001", binding, "", mutation=mutation)


def _inplace_module(lines: _Lines, f: ProbeFinding) -> Finding | None:
    """GG005 an ``inplace=True`` module overwrote what an op saved, placed by the probe at the module's constructor
    (the line to change): the static finding with that constructor (``Mutation.module``).  A finding placed
    elsewhere (a hook that keeps the output: the clone belongs there) gets none: the hook may keep the outputs of
    other in-place modules too, which one constructor's flag would leave overwritten (a real case did)."""
    if f.code != "GG005":
        return None
    simple = [s for s in lines.statements_at(f.site.line) if not hasattr(s, "body")]
    ctors = [n for s in simple[-1:] for n in ast.walk(s) if isinstance(n, ast.Call) and n.lineno == f.site.line and any(
        k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is True for k in n.keywords)]
    if f.site.column:  # the one the probe names, where it says which
        ctors = [c for c in ctors if c.col_offset + 1 == f.site.column]
    if len(ctors) != 1:
        return None
    name = ast.unparse(ctors[0].func).rsplit(".", 1)[-1]
    module = ModuleValue(name, True, inplace=True, ctor=ctors[0])
    mutation = Mutation(ctors[0], Tensor(Storage(), Grad.YES, leaf=False), "inplace=True", True, 0, module=module)
    return Finding("GG005", ctors[0], "", mutation=mutation)


def _inplace_activation(lines: _Lines, f: ProbeFinding) -> Finding | None:
    """GG005 an in-place functional activation (``h = F.leaky_relu_(h, -0.5)``) whose backward torch refuses:
    the static finding at the call (its out-of-place form)."""
    if f.code != "GG005" or f.origins:
        return None
    stmt = lines.simple_statement_at(f.site.line)
    calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call) and (
        isinstance(n.func, (ast.Attribute, ast.Name)) and (getattr(n.func, "attr", None) or getattr(n.func, "id", ""))
        .endswith("_") or any(k.arg == "inplace" for k in n.keywords))] if stmt is not None else []
    if len(calls) != 1:
        return None
    mutation = Mutation(calls[0], Tensor(Storage(), Grad.YES, leaf=False), "", True, 0, functional_inplace=True)
    return Finding("GG005", calls[0], "", mutation=mutation)


def _the_write(lines: _Lines, line: int) -> ast.AST | None:
    """The in-place write on ``line`` as a Mutation's node: the ``+=`` or ``t[i] = v`` statement, or the one call of
    an in-place method (``t.add_(...)``, ``out=``) in its statement."""
    stmt = lines.simple_statement_at(line)
    if isinstance(stmt, ast.AugAssign) or isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
            and isinstance(stmt.targets[0], ast.Subscript):
        return stmt
    calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call) and (
        isinstance(n.func, ast.Attribute) and n.func.attr.endswith("_") and not n.func.attr.startswith("_")
        or any(k.arg == "out" for k in n.keywords))] if stmt is not None else []
    return calls[0] if len(calls) == 1 else None


def _expression_at(lines: _Lines, site: Site) -> ast.expr | None:
    """The outermost expression that starts at ``site`` (line and 1-based column) in a simple statement (which may
    start on an earlier line)."""
    stmt = lines.simple_statement_around(site.line)
    if stmt is None or not site.column:
        return None
    starting = [n for n in ast.walk(stmt) if isinstance(n, (ast.Call, ast.BinOp, ast.Subscript, ast.Attribute, ast.Name))
                and n.lineno == site.line and n.col_offset + 1 == site.column]
    # The probe gives where the expression ends too: `a @ b` of `a @ b + c` starts where the sum does.
    exact = [n for n in starting if (n.end_lineno, n.end_col_offset + 1) == (site.end_line, site.end_column)]
    return max(exact or starting, key=lambda n: (n.end_lineno, n.end_col_offset)) if starting else None


def _write_to_saved(lines: _Lines, f: ProbeFinding) -> Finding | None:
    """GG001 an in-place write, at the finding's own line, to a tensor ops saved for a backward: the static finding
    at the write, with the saves the probe saw (the op, its role, the expression at its line) as its conflicts."""
    if f.code != "GG001" or f.notes and f.notes[0].message in PLACED or not f.saves or f.backward is None:
        return None
    write = _the_write(lines, f.site.line)
    backward = lines.simple_statement_at(f.backward.line) if f.backward.path == f.site.path else None
    if write is None or backward is None or lines.grad_off_around(f.site.line):
        return None  # (with grad mode off, writing out of place would drop the graph: the rule's no_grad fixes differ)
    target = Tensor(Storage(), Grad.YES, leaf=False)
    sink = Sink("backward", backward, frozenset(), 1)
    conflicts = []
    for saving in f.saves:
        node = _expression_at(lines, saving.site) if saving.site and saving.site.path == f.site.path else None
        if node is None or saving.op is None:
            return None
        role = "output" if saving.role == "output" else "input"
        # A custom Function's `ctx.save_for_backward(a, b)` (a call that returns None) saved one of its arguments; the
        # probe does not say which: each argument is a save whose operand is that argument, so that a clone where it
        # is saved copies them all (the backward reads the same values) -- never the call.
        operands = node.args if saves_by_call(node) else [None]
        if not operands or any(isinstance(a, ast.Starred) for a in operands):
            return None
        conflicts += [Conflict(Save(target.storage, 0, saving.op, role, node, True, operand=a), sink) for a in operands]
    mutation = Mutation(write, target, "", True, 0, conflicts=conflicts)
    return Finding("GG001", write, "", mutation=mutation)


def _written_root(write: ast.AST) -> ast.expr | None:
    """The tensor a write changes, as written: ``self.queue`` of ``self.queue[:, i:j] = v`` or ``self.queue.add_(v)``."""
    if isinstance(write, ast.Assign):
        target = write.targets[0]
    elif isinstance(write, ast.AugAssign):
        target = write.target
    elif isinstance(write, ast.Call) and isinstance(write.func, ast.Attribute):
        target = write.func.value
    else:
        return None
    while isinstance(target, ast.Subscript):
        target = target.value
    return target


def _state_read_by_op(lines: _Lines, f: ProbeFinding) -> Finding | None:
    """GG001 a method of the object (``self.enqueue(k)``) writes in place its tensor (``self.queue[...] = k``) that
    an op read and saved before the call (``q @ self.queue``): the static finding about a state read by reference,
    whose fix reads a copy at the op.  Placed at the call; the write is the note."""
    setter = _note(f, SETTER_NOTE)
    if f.code != "GG001" or setter is None or len({s.site for s in f.saves}) != 1 or f.saves[0].site is None \
            or f.saves[0].site.path != f.site.path:
        return None
    call = lines.simple_statement_at(f.site.line)
    write = _the_write(lines, setter.line)
    root = _written_root(write) if write is not None else None
    calls = [n for n in ast.walk(call) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"] if call is not None else []
    if len(calls) != 1 or not (isinstance(root, ast.Attribute) and isinstance(root.value, ast.Name)
                               and root.value.id == "self"):
        return None
    op = _expression_at(lines, f.saves[0].site)
    state = ast.unparse(root)
    # Read once: the fix copies the one read (a second read of the state would still be saved).
    if op is None or sum(1 for n in ast.walk(op) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)
                         and ast.unparse(n) == state) != 1:
        return None
    mutation = Mutation(calls[0], Tensor(Storage(), Grad.YES, leaf=False), "", True, 0)
    return Finding("GG001", op, "", mutation=mutation, data={"state": state})


def _renormalised_weight_read(lines: _Lines, f: ProbeFinding) -> Finding | None:
    """GG005 an embedding made with max_norm renormalises its weight in place when called (``emb(idx)``, the note),
    after an op read and saved that weight (``emb.weight @ w``, the finding's line): a copy read at the op, as
    torch's documentation of max_norm says (``emb.weight.clone() @ w``) -- GG001's fix of a state read by an op."""
    renorm = _note(f, RENORM_NOTE)
    if f.code != "GG005" or renorm is None or len({s.site for s in f.saves}) != 1 or f.saves[0].site is None \
            or f.saves[0].site.path != f.site.path:
        return None
    call = lines.simple_statement_at(renorm.line)
    modules = {ast.unparse(n.func) for n in ast.walk(call) if isinstance(n, ast.Call)
               and isinstance(n.func, (ast.Name, ast.Attribute))} if call is not None else set()
    op = _expression_at(lines, f.saves[0].site)
    if op is None:
        return None
    read = [ast.unparse(n) for n in ast.walk(op) if isinstance(n, ast.Attribute) and n.attr == "weight"
            and isinstance(n.ctx, ast.Load) and ast.unparse(n.value) in modules]
    if len(read) != 1:  # read once: the fix copies the one read (a second read would still be saved)
        return None
    mutation = Mutation(op, Tensor(Storage(), Grad.YES, leaf=True, param=True), "", True, 0)
    return Finding("GG001", op, "", mutation=mutation, data={"state": read.pop()})


def _step_before_backward(lines: _Lines, f: ProbeFinding) -> Finding | None:
    """GG101 a forward, then an optimizer step that updates weights its graph saved, then that graph's backward, all
    in one function (the probe places it at the forward, the step as its first note, the calls that lead to a step
    or a backward inside a helper as notes): the static finding of the step, with the backward the probe saw as its
    conflict and the forward the probe saw save as its save.  The
    rule's fix moves the step after the backward, or computes the forward after the step (checked by
    ``_saves_still_before``)."""
    if f.code != "GG101" or f.backward is None or not f.notes or f.notes[0].message != STEP_NOTE or not f.saves:
        return None
    # A step or a backward inside a helper is moved by the call that leads to it, in the function that runs both.
    step_site = _note(f, STEP_CALL_NOTE) or f.notes[0].site
    backward_site = _note(f, BACKWARD_CALL_NOTE) or f.backward
    if step_site.path != f.site.path or backward_site.path != f.site.path:
        return None
    step = lines.simple_statement_at(step_site.line)
    backward = lines.simple_statement_at(backward_site.line)
    forward = _expression_at(lines, f.site)
    if step is None or backward is None or forward is None or not f.site.line < step.lineno < backward.lineno:
        return None
    function = lines.function_of(step)
    # The forward the probe names in the step's function, and the ops it saw save there (a save inside a module's
    # forward is reached through the forward's call).
    saved = [forward, *(n for s in f.saves if s.site and s.site.path == f.site.path
                        and (n := _expression_at(lines, s.site)) is not None
                        and lines.function_of(lines.statements_at(s.site.line)[-1]) is function)]
    if lines.function_of(backward) is not function or lines.function_of(lines.statements_at(f.site.line)[-1]) \
            is not function:
        return None
    target = Tensor(Storage(), Grad.YES, leaf=True, param=True)
    sink = Sink("backward", backward, frozenset(), 1)
    conflicts = [Conflict(Save(target.storage, 0, f.saves[0].op or "*", "weight", node, True), sink)
                 for node in saved]
    mutation = Mutation(step, target, ".step()", False, 0, kind="step", conflicts=conflicts)
    return Finding("GG101", step, "", mutation=mutation, data={"saved": [ast.unparse(n) for n in saved]})


def _saves_still_before(finding: Finding) -> StillFound:
    """How a GG101 fix built from the probe's facts is checked (``FixContext.still_found``): the finding is still
    there while an expression the probe saw save the weights (``data["saved"]``, as written) is computed before the
    step in the candidate's text, unless it is a plain assignment of names, in the step's own block, each of which a
    later statement of that block assigns again (a plain assignment) before any reads it (a forward computed again
    after the step leaves its first computation unread).  Anything else counts as still found."""
    saved = set(finding.data.get("saved", ()))

    def check(fixed: str, found: FindingId) -> bool:
        parsed = parsing.parse(fixed)
        if isinstance(parsed, parsing.SyntaxProblem):
            return True
        lines = _Lines(parsed)
        step = lines.simple_statement_at(found.line)
        if step is None:
            return True
        function = lines.function_of(step)
        block = next((body for n in ast.walk(function) for _, body in blocks(n) if any(st is step for st in body)),
                     None)
        if block is None:
            return True
        i = next(k for k, st in enumerate(block) if st is step)
        for st in (n for n in ast.walk(function) if isinstance(n, ast.stmt) and n.lineno < step.lineno):
            if not any(isinstance(n, ast.expr) and ast.unparse(n) in saved for n in ast.walk(st)) \
                    or hasattr(st, "body"):
                continue
            if not any(st is b for b in block[:i]) or not _assigns_names(st):
                return True
            if any(not _assigned_again_unread(name, block[i + 1:]) for name in _names_stored(st)):
                return True
        return False

    return check


def _assigns_names(st: ast.stmt) -> bool:
    """``a = ...``, ``a, b = ...``: an assignment of plain names only."""
    return isinstance(st, ast.Assign) and all(
        isinstance(t, ast.Name) or isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts)
        for t in st.targets)


def _names_stored(st: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(st) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _assigned_again_unread(name: str, statements: list[ast.stmt]) -> bool:
    """Whether a plain assignment among ``statements`` (one block, in order) binds ``name`` again before any of
    them reads it (a statement's reads come first; a compound statement that touches it counts as a read)."""
    for st in statements:
        names = [n for n in ast.walk(st) if isinstance(n, ast.Name) and n.id == name]
        if not names:
            continue
        return _assigns_names(st) and not any(isinstance(n.ctx, ast.Load) for n in names)
    return False


def _unreturned_loss(lines: _Lines, f: ProbeFinding) -> Finding | None:
    """GG103 a ``training_step`` that ends without returning the scalar with a graph it computed (the probe places it
    at the statement it ended on, and names where the method last binds that scalar, ``RETURNED_LOSS_NOTE``): the
    static finding of an unreturned loss, whose fix returns that name at the method's end (refused unless a
    statement of the method's own body binds it, so on every path to its end, and where the method returns on
    another path)."""
    bound = _note(f, RETURNED_LOSS_NOTE)
    if f.code != "GG103" or bound is None or bound.path != f.site.path:
        return None
    end = (lines.statements_at(f.site.line) or [None])[-1]
    name = next((n for st in lines.statements_at(bound.line) for n in ast.walk(st)
                 if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.lineno == bound.line
                 and n.col_offset + 1 == bound.column), None)
    # A method that returns on another path skips those batches on purpose (the static analysis does not flag it).
    if end is None or name is None or any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom))
                                          for n in ast.walk(lines.function_of(end))):
        return None
    return Finding("GG103", end, "", data={"unreturned": name})


# torch's refusal of `.detach_()` on a view (the probe's finding keeps torch's message)
_DETACH_VIEW_REFUSED = "Can't detach views in-place"


def _detach_refused_on_view(f: ProbeFinding) -> bool:
    return f.code == "GG103" and (f.torch_message or "").startswith(_DETACH_VIEW_REFUSED)


def _detach_refused(lines: _Lines, f: ProbeFinding) -> Finding | None:
    """GG103 torch refused ``x.detach_()`` because ``x`` is a view (the probe places it at the call, torch's message
    kept): the static finding's ``detach`` write, refused on a view, whose fix (``x = x.detach()``, as torch's message
    says) asks the static analysis's runs of the same call who else holds the tensor (``_as_the_runs_saw``)."""
    stmt = lines.simple_statement_at(f.site.line) if _detach_refused_on_view(f) else None
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "detach_"):
        return None
    mutation = Mutation(call, Tensor(Storage(), Grad.YES, leaf=False), "`.detach_()`", True, 0, kind="detach",
                        refused_view=True)
    return Finding("GG103", call, "", data={"detach": True}, mutation=mutation)


SHAPES: tuple[Callable[[_Lines, ProbeFinding], Finding | None], ...] = (
    _flag, _cut, _rebuild, _view_binding, _copy_at_binding, _inplace_module, _inplace_activation, _write_to_saved,
    _state_read_by_op, _renormalised_weight_read, _step_before_backward, _unreturned_loss, _detach_refused)


# --- shapes whose fix is an edit no rule's builder makes: built here, from the probe's facts alone ----------------

# The notes the probe gives a finding of gradients a step applies again (``probe/stale_grads.py``) and of a loaded
# copy replaced by the trained module (``probe/synced.py``).
_STALE_STEP_NOTE = "the step that applies the old gradients again"
_LOADED_NOTE = "the weights are copied here"
# A forward hook's kept output overwritten in place (``probe/grad_hooks.py``), the write as its first note.
_KEPT_WRITTEN_NOTE = "the kept output is overwritten in place here"


def _block_of(lines: _Lines, stmt: ast.stmt) -> list[ast.stmt] | None:
    """The statement list ``stmt`` is directly in."""
    return next((body for n in ast.walk(lines.tree) for _, body in blocks(n) if any(st is stmt for st in body)), None)


def _stores(node: ast.AST, chain: str) -> bool:
    """Whether ``node`` binds ``chain`` (``opt``, ``self.opt``) or the name it starts from, anywhere inside."""
    root = chain.split(".")[0]
    for n in ast.walk(node):
        if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del)) \
                and ast.unparse(n) in (chain, root):
            return True
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == root:
            return True
    return False


def _runs_backward(node: ast.AST) -> bool:
    """Whether ``node`` calls a backward (``loss.backward()``, ``torch.autograd.backward(...)``) or writes a ``.grad``."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward"
               or isinstance(n, ast.Attribute) and n.attr == "grad" and isinstance(n.ctx, (ast.Store, ast.Del))
               for n in ast.walk(node))


def _indent(text_lines: list[str], stmt: ast.stmt) -> str | None:
    """The indentation of ``stmt``'s first line when the statement starts that line (nothing before it)."""
    line = text_lines[stmt.lineno - 1] if stmt.lineno <= len(text_lines) else ""
    head = line[:len(line) - len(line.lstrip())]
    return head if len(head.encode("utf-8")) == stmt.col_offset else None


def _zero_grad_before_backward(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG101 a backward adds to gradients an optimizer step already applied (nothing cleared them since): the probe
    places it at the first backward the step's function ran before the step, with the step as a note.  Clear the
    step's optimizer's gradients just before that backward (``opt.zero_grad()``), when the backward and the step are
    statements of one block, the step a plain ``<name>.step()`` call and nothing earlier in the block runs a
    backward or writes a ``.grad`` (its gradients would be cleared too: they are meant to add up).  A step under a
    condition (gradients accumulated over several batches) is not of this shape: it gets no fix."""
    step_site = _note(f, _STALE_STEP_NOTE)
    if f.code != "GG101" or f.kind != "silent" or step_site is None or step_site.path != f.site.path \
            or f.backward is None:
        return None
    backward = lines.simple_statement_at(f.site.line)
    step = lines.simple_statement_at(step_site.line)
    if backward is None or not isinstance(step, ast.Expr) or not _runs_backward(backward):
        return None
    call = step.value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "step"
            and not call.args and not call.keywords and is_dotted(call.func.value)):
        return None
    block = _block_of(lines, backward)
    if block is None or not any(st is step for st in block):
        return None
    i, k = next(n for n, st in enumerate(block) if st is backward), next(n for n, st in enumerate(block) if st is step)
    optimizer = ast.unparse(call.func.value)
    if not i < k or any(_runs_backward(st) for st in block[:i]) or any(_stores(st, optimizer) for st in block):
        return None
    indent = _indent(text.splitlines(), backward)
    if indent is None:
        return None
    edit = TextEdit(backward.lineno, 1, backward.lineno, 1, f"{indent}{optimizer}.zero_grad()\n")
    return Fix(f"Clear the gradients before the backward: `{optimizer}.zero_grad()` (unsafe: gradients meant to add "
               "up across steps no longer do)", False, (edit,))


def _keep_loaded_copy(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG101 ``target = online`` right after ``target.load_state_dict(online.state_dict())`` drops the loaded copy
    and stores the trained module in its place (the probe saw the copy freed unused, and a step change the module):
    remove the assignment (``pass`` when it is its block's only statement), keeping the copy the load filled."""
    loaded = _note(f, _LOADED_NOTE)
    if f.code != "GG101" or f.kind != "silent" or loaded is None or loaded.path != f.site.path:
        return None
    stmt = lines.simple_statement_at(f.site.line)
    load = lines.simple_statement_at(loaded.line)
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and is_dotted(stmt.targets[0])
            and is_dotted(stmt.value) and isinstance(load, ast.Expr)):
        return None
    target, online = ast.unparse(stmt.targets[0]), ast.unparse(stmt.value)
    if ast.unparse(load.value) != f"{target}.load_state_dict({online}.state_dict())":
        return None
    block = _block_of(lines, stmt)
    indent = _indent(text.splitlines(), stmt)
    if block is None or indent is None or stmt.end_lineno is None:
        return None
    if len(block) == 1:
        edit = TextEdit(stmt.lineno, 1, stmt.end_lineno + 1, 1, f"{indent}pass\n")
    else:
        edit = TextEdit(stmt.lineno, 1, stmt.end_lineno + 1, 1, "")
    end = text.splitlines()[stmt.end_lineno - 1]
    if end.rstrip().endswith(";") or ";" in end[stmt.end_col_offset:]:
        return None  # another statement on the line
    return Fix(f"Keep the loaded copy: remove `{target} = {online}` (unsafe: code that relies on the two names "
               "holding one module changes)", False, (edit,))


def _clone_kept_hook_output(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """A forward hook keeps its module's output itself (``self.kept.append(output)``) and a later in-place module
    overwrites it: the probe places it at the hook's use of its output parameter as a whole value (line and column),
    the write as the first note.  Keep a clone there (``output.clone()``: the values before the write, with their
    graph), when that use is the hook's only whole use of the parameter and the hook never rebinds it."""
    written = f.notes[0] if f.notes else None
    if f.code not in ("GG001", "GG005") or written is None or written.message != _KEPT_WRITTEN_NOTE \
            or not f.site.column:
        return None
    stmt = lines.simple_statement_around(f.site.line)
    if stmt is None:
        return None
    hook = lines.function_of(stmt)
    if not isinstance(hook, (ast.FunctionDef, ast.AsyncFunctionDef)) or hook.args.vararg is not None:
        return None
    params = [a.arg for a in hook.args.posonlyargs + hook.args.args]
    if not params:
        return None
    name = params[-1]  # torch calls a forward hook with the output last
    receivers = {id(n.value) for n in ast.walk(hook) if isinstance(n, (ast.Attribute, ast.Subscript))}
    uses = [n for n in ast.walk(hook) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
            and id(n) not in receivers]
    if len(uses) != 1 or _stores(hook, name) or (uses[0].lineno, uses[0].col_offset + 1) != (f.site.line,
                                                                                              f.site.column):
        return None
    source = text.splitlines()
    if uses[0].end_lineno is None or uses[0].end_lineno > len(source):
        return None
    column = _char_column(source, uses[0].end_lineno, uses[0].end_col_offset)
    edit = TextEdit(uses[0].end_lineno, column, uses[0].end_lineno, column, ".clone()")
    return Fix(f"Keep a clone of the hook's output: `{name}.clone()`", True, (edit,))


def _char_column(source: list[str], line: int, offset: int) -> int:
    """The 1-based code-point column of the UTF-8 byte ``offset`` on ``line`` (``ast`` counts bytes)."""
    return code_point_column(source[line - 1], offset) + 1


def _clone_pieces(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG004 ``q, k, v = self.proj(x).split(d, -1)`` hands one of the views to code that writes it in place, which
    torch refuses (the probe places it where the views are made, the write as the note): unpack clones of the pieces,
    ``(piece.clone() for piece in ...)``.  Only for a split of a call's result unpacked into names: nothing else can
    read the tensor the pieces are views of, and the pieces share no memory, so each write changes only its clone,
    as it meant to change only its piece (iterating a tensor, or splitting a named one, is left alone: the writes
    may be meant to change that tensor)."""
    if f.code != "GG004" or not f.notes or f.notes[0].message != MULTI_VIEW_NOTE:
        return None
    stmt = lines.simple_statement_at(f.site.line)
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in stmt.targets[0].elts) and isinstance(stmt.value, ast.Call)):
        return None
    call = stmt.value
    if not isinstance(call.func, ast.Attribute) or call.func.attr not in PIECES:
        return None
    if ast.unparse(call.func.value) == "torch":  # torch.split(t, ...)
        split = call.args[0] if call.args else None
    else:
        split = call.func.value
    if not isinstance(split, ast.Call) or call.end_lineno is None:
        return None
    source = text.splitlines()
    start = _char_column(source, call.lineno, call.col_offset)
    end = _char_column(source, call.end_lineno, call.end_col_offset)
    edits = (TextEdit(call.lineno, start, call.lineno, start, "(piece.clone() for piece in "),
             TextEdit(call.end_lineno, end, call.end_lineno, end, ")"))
    return Fix("Unpack clones of the pieces: `(piece.clone() for piece in ...)`", True, edits)


def _clone_rows_of_leaf(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG004 ``for img in batch:`` over a leaf that requires grad (a parameter), handing each row to a helper that
    writes it in place, which torch refuses (the probe places it at the loop, the write as ``LEAF_ROWS_NOTE``: it saw
    the rows' tensor is such a leaf).  No view of that leaf can be written with grad mode on (plain views neither:
    GG004's own fix of a loop over rows refuses it), so no write ever reached it: iterate over clones of the rows,
    ``[row.clone() for row in batch]``, which the writes may change, and whose history still leads back to the leaf.
    Only for a ``for`` loop at the finding's line whose iterable is the tensor itself (not ``enumerate(...)`` or
    another function's call of it)."""
    if f.code != "GG004" or not f.notes or f.notes[0].message != LEAF_ROWS_NOTE or f.view_node != "Unbind":
        return None
    loops = [s for s in lines.statements_at(f.site.line) if isinstance(s, ast.For) and s.lineno == f.site.line]
    if len(loops) != 1 or loops[0].iter.end_lineno is None:
        return None
    it = loops[0].iter
    if isinstance(it, ast.Call) and not isinstance(it.func, ast.Attribute) or isinstance(it, (ast.Starred, ast.Tuple,
                                                                                           ast.List, ast.Constant)):
        return None
    row = next(n for n in ("row", "row_", "row__") if all(getattr(x, "id", None) != n for x in ast.walk(it)))
    source = text.splitlines()
    start = _char_column(source, it.lineno, it.col_offset)
    end = _char_column(source, it.end_lineno, it.end_col_offset)
    atom = isinstance(it, (ast.Name, ast.Attribute, ast.Subscript, ast.Call))
    edits = (TextEdit(it.lineno, start, it.lineno, start, f"[{row}.clone() for {row} in " + ("" if atom else "(")),
             TextEdit(it.end_lineno, end, it.end_lineno, end, ("" if atom else ")") + "]"))
    said = ast.unparse(it) if atom and len(ast.unparse(it)) <= 40 else "..."
    return Fix(f"Iterate over clones of the rows: `[{row}.clone() for {row} in {said}]` (unsafe: the in-place writes "
               f"change the clones, not the tensor iterated)", False, edits)


def _step_after_stale_backward(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG101 an optimizer step between a graph's forward and the backward of a loss built, after the step, on values
    computed before it (the probe places it at the step, the use as ``STALE_USE_NOTE``, and saw that computing that
    value again would still run into the old graph): move the step to just after that backward.  Only when the step
    is a plain ``<chain>.step()``, the backward a plain ``<name>.backward(...)`` later in the step's block, the use
    the probe saw lies between them, and every statement in between computes values only (``_values_only``): nothing
    there can read the weights the step changes, or clear or read a gradient, so it computes what it did before."""
    use = f.notes[0].site if f.notes and f.notes[0].message == STALE_USE_NOTE else None
    if f.code != "GG101" or use is None or f.backward is None or use.path != f.site.path \
            or f.backward.path != f.site.path:
        return None
    step = lines.simple_statement_at(f.site.line)
    backward = lines.simple_statement_at(f.backward.line)
    if not (isinstance(step, ast.Expr) and isinstance(step.value, ast.Call) and _is_step(step.value)
            and isinstance(backward, ast.Expr) and _plain_backward(backward.value)):
        return None
    block = _block_of(lines, step)
    if block is None or not any(st is backward for st in block):
        return None
    i, j = next(n for n, st in enumerate(block) if st is step), next(n for n, st in enumerate(block) if st is backward)
    between = block[i + 1:j]
    if not i < j or not any(st.lineno <= use.line <= st.end_lineno for st in block[i + 1:j + 1]):
        return None
    ctx = FixContext(text, lines.tree)
    function = lines.function_of(step)
    if not all(_values_only(ctx, function, st) for st in between):
        return None
    try:
        ctx.require_own_lines(step)
        ctx.require_own_lines(backward)
        edits = tuple(move_statements_after(ctx, [step], [step], backward))
    except CannotFix:
        return None
    shown, after = ast.unparse(step), ast.unparse(backward)
    return Fix(f"Step after the backward: move `{shown[:60]}` after `{after[:60]}` (unsafe: the step also applies "
               "the gradients that backward adds to its parameters)", False, edits)


def _is_step(call: ast.Call) -> bool:
    """``opt.step()``, ``self.opt.step()``: a step of an optimizer named by a plain chain, with no closure."""
    return (isinstance(call.func, ast.Attribute) and call.func.attr == "step" and not call.args and not call.keywords
            and is_dotted(call.func.value))


def _plain_backward(node: ast.expr) -> bool:
    """``loss.backward()`` (constant arguments at most): a backward that computes nothing itself."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "backward"
            and isinstance(node.func.value, ast.Name)
            and all(isinstance(a, ast.Constant) for a in [*node.args, *(k.value for k in node.keywords)]))


def _values_only(ctx: FixContext, function: ast.AST, stmt: ast.stmt) -> bool:
    """Whether ``stmt`` assigns plain names from tensor math on names only: torch functions (not modules, optimizers
    or autograd), tensor methods that write nothing and touch no gradient, operators and subscripts; no attribute
    read, no other call, and no name read that ``function`` binds as a second name of another object (``w =
    self.fc.weight``, a loop over parameters) or that is not bound in it at all (a global: a module, a parameter)."""
    if not (isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) or isinstance(t, ast.Tuple) and all(
            isinstance(e, ast.Name) for e in t.elts) for t in stmt.targets)):
        return False
    bound = _plain_bindings(function)
    for node in ast.walk(stmt.value):
        if isinstance(node, ast.Call):
            func = node.func
            q = ctx.qual(func) or ""
            if q.startswith("torch.") and not q.startswith(("torch.nn.", "torch.autograd", "torch.optim")) \
                    or q.startswith("torch.nn.functional."):
                continue
            if isinstance(func, ast.Attribute) and not q and isinstance(func.value, (ast.Name, ast.Call, ast.Subscript)) \
                    and func.attr in TENSOR_NAMES and not func.attr.endswith("_") \
                    and func.attr not in LEAF_IDENTITY_ATTRS and func.attr != "backward":
                continue
            return False
        if isinstance(node, ast.Attribute) and not (ctx.qual(node) or "").startswith("torch."):
            if not any(isinstance(c, ast.Call) and c.func is node for c in ast.walk(stmt.value)):
                return False
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in ctx.imports \
                and bound.get(node.id) is not True:
            return False
        if isinstance(node, (ast.Lambda, ast.comprehension, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
            return False
    return True


def _plain_bindings(function: ast.AST) -> dict[str, bool]:
    """The names ``function`` binds: True for an argument, or a name only ever assigned the result of a computation
    (a call, an operator, a subscript, a literal); False for one also bound as a second name of an object (``w =
    self.fc.weight``, ``a = b``), by a loop, a ``with``, an import or anything else."""
    out: dict[str, bool] = {}
    if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = function.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None and a.arg != "self":
                out[a.arg] = True
    for node in ast.walk(function):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not function:
            out[node.name] = False
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.setdefault(node.id, True)
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            holder = next((s for s in ast.walk(function) if isinstance(s, ast.stmt) and not hasattr(s, "body")
                           and any(t is node for t in ast.walk(s))), None)
            computed = isinstance(holder, ast.Assign) and not isinstance(holder.value, (ast.Name, ast.Attribute)) \
                and any(any(t is node for t in ast.walk(target)) for target in holder.targets)
            if not computed:
                out[node.id] = False
    return out


def _switches_off(node: ast.expr) -> bool:
    """``torch.no_grad()`` or ``torch.set_grad_enabled(False)``: a switch ``torch.enable_grad()`` undoes (an
    ``inference_mode`` block is not: its tensors never join a graph, whatever the grad mode)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "torch"):
        return False
    if node.func.attr == "no_grad":
        return not node.args and not node.keywords
    return node.func.attr == "set_grad_enabled" and len(node.args) == 1 and not node.keywords \
        and isinstance(node.args[0], ast.Constant) and node.args[0].value is False


def _grad_off_block(lines: _Lines, line: int) -> ast.With | None:
    """The ``with torch.no_grad():`` statement that starts on ``line`` (its only item a switch to off)."""
    return next((s for s in lines.statements_at(line) if isinstance(s, ast.With) and s.lineno == line
                 and len(s.items) == 1 and s.items[0].optional_vars is None and _switches_off(s.items[0].context_expr)),
                None)


def _imports_torch(tree: ast.Module) -> bool:
    """``import torch`` at the module's top level: ``torch.enable_grad`` can be named anywhere in it."""
    return any(isinstance(s, ast.Import) and any(a.name == "torch" and a.asname is None for a in s.names)
               for s in tree.body)


def _enable_grad_around(lines: _Lines, text: str, stmt: ast.stmt) -> tuple[TextEdit, ...] | None:
    """``with torch.enable_grad():`` around the simple statement ``stmt``, whose lines are indented one level more:
    only where it starts and ends its lines (nothing else on them but a comment), is indented with spaces, and
    holds no string written over several lines (indenting would change it)."""
    source = text.splitlines()
    indent = _indent(source, stmt)
    end = stmt.end_lineno
    if indent is None or "\t" in indent or end is None or stmt.end_col_offset is None or not _imports_torch(lines.tree) \
            or not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return)):
        return None
    rest = source[end - 1].encode("utf-8")[stmt.end_col_offset:].decode("utf-8", "replace").strip()
    if rest and not rest.startswith("#"):
        return None  # another statement on the line
    if any(isinstance(n, (ast.Constant, ast.JoinedStr)) and n.lineno != n.end_lineno for n in ast.walk(stmt)):
        return None
    if any(source[k].strip() and not source[k].startswith(indent) for k in range(stmt.lineno, end)):
        return None  # a continuation line indented less than the statement: leave its layout alone
    header = TextEdit(stmt.lineno, 1, stmt.lineno, 1, f"{indent}with torch.enable_grad():\n")
    return (header, *(TextEdit(k, 1, k, 1, "    ") for k in range(stmt.lineno, end + 1) if source[k - 1].strip()))


def _grad_on_for_dead_term(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG103 a loss term computed from a call that ran, inside a ``with torch.no_grad():`` block (the probe's
    ``GRAD_OFF_NOTE``), on values that require grad: the term has no graph and trains nothing.  Run that statement
    with grad mode on (``with torch.enable_grad():`` around it, inside the block): it computes what it did, now with
    a graph, as it would outside the block; the block's other statements stay as they are.  Only when the term's
    statement lies in that block, in the same function (a helper called there is left alone)."""
    switch = _note(f, GRAD_OFF_NOTE)
    if f.code != "GG103" or f.kind != "starved" or switch is None:
        return None
    block = _grad_off_block(lines, switch.line)
    stmt = lines.simple_statement_around(f.site.line)
    if block is None or stmt is None or not block.lineno < stmt.lineno <= (block.end_lineno or 0) \
            or lines.function_of(stmt) is not lines.function_of(block):
        return None
    edits = _enable_grad_around(lines, text, stmt)
    return Fix("Compute the term with grad mode on: `with torch.enable_grad():` around it (unsafe: every tensor "
               "it reads that requires grad now gets a gradient through it)", False, edits) if edits else None


def _grad_on_for_decorated_call(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG103 a loss term computed by a call of a function decorated ``@torch.no_grad()`` (written for evaluation) on
    values that require grad: the probe places it at the call, which switched grad mode off itself (no
    ``GRAD_OFF_NOTE``: the switch is the call).  Call the undecorated function there, ``helper.__wrapped__(...)``
    (torch's decorator wraps with ``functools.wraps``): this call computes what it did, now with a graph, as
    ``_grad_on_for_dead_term`` does for a term in a ``with`` block; the helper's other callers keep grad mode off.
    Only for a plain name bound once in the module, by a top-level ``def`` whose one decorator is ``torch.no_grad()``,
    and whose body writes nothing in place and takes no gradient (with grad mode on, autograd could refuse it)."""
    if f.code != "GG103" or f.kind != "starved" or _note(f, GRAD_OFF_NOTE) is not None:
        return None
    call = _expression_at(lines, f.site)
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)) or call.func.end_lineno is None \
            or lines.grad_off_around(call.lineno):  # (a block around the call would keep grad mode off)
        return None
    name = call.func.id
    defs = [s for s in lines.tree.body if isinstance(s, ast.FunctionDef) and s.name == name]
    bound = [n for n in ast.walk(lines.tree) if isinstance(n, ast.Name) and n.id == name
             and isinstance(n.ctx, (ast.Store, ast.Del))
             or isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
             or isinstance(n, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal)) and any(
                 (getattr(a, "asname", None) or getattr(a, "name", a)).split(".")[0] == name
                 for a in getattr(n, "names", ()))
             or isinstance(n, ast.arg) and n.arg == name]
    if len(defs) != 1 or bound != defs or len(defs[0].decorator_list) != 1 \
            or not _switches_off(defs[0].decorator_list[0]) \
            or ast.unparse(defs[0].decorator_list[0].func) != "torch.no_grad":
        return None
    helper = defs[0]
    for n in ast.walk(helper):
        if isinstance(n, (ast.AugAssign, ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal)) \
                or isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del)) \
                or isinstance(n, ast.Call) and (
                    isinstance(n.func, ast.Attribute) and (n.func.attr in ("backward", "grad") or n.func.attr.endswith(
                        "_") and not n.func.attr.startswith("__")) or any(k.arg == "out" for k in n.keywords)):
            return None
    column = _char_column(text.splitlines(), call.func.end_lineno, call.func.end_col_offset)
    edit = TextEdit(call.func.end_lineno, column, call.func.end_lineno, column, ".__wrapped__")
    return Fix(f"Compute the term with grad mode on: call the undecorated `{name}.__wrapped__(...)` here (unsafe: every "
               "tensor it reads that requires grad now gets a gradient through it)", False, (edit,))


def _grad_on_for_loss_in_block(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG103 a ``with torch.no_grad():`` block computed the value a later backward starts from, which raises (no
    graph): the probe places it at the block.  Run with grad mode on the one statement of the block whose names are
    read after it (``with torch.enable_grad():`` around it): only when the block's statements all assign plain
    names, that one is the last, the backward runs after the block, and it reads nothing the block computed before
    it -- what the block computes for it (a teacher's targets) may be meant without a graph, or may be the very
    value that needs one, and nothing tells which."""
    block = _grad_off_block(lines, f.site.line)
    if f.code != "GG103" or f.kind != "raised" or block is None or len(f.notes) != 1 or f.origins != (f.notes[0].site,) \
            or f.notes[0].site.path != f.site.path or block.end_lineno is None \
            or block.lineno <= f.notes[0].site.line <= block.end_lineno:
        return None
    body = block.body
    if not all(_assigns_names(st) for st in body):
        return None
    function = lines.function_of(block)
    later = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
             and n.lineno > block.end_lineno}
    outputs = [st for st in body if _names_stored(st) & later]
    if outputs != body[-1:]:
        return None
    earlier = set().union(*(_names_stored(st) for st in body[:-1]))
    if any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in earlier for n in ast.walk(body[-1])):
        return None
    edits = _enable_grad_around(lines, text, body[-1])
    return Fix("Compute the loss with grad mode on: `with torch.enable_grad():` around the block's statement that "
               "computes it (unsafe: every tensor it reads that requires grad now gets a gradient through it)", False,
               edits) if edits else None


def _reads_flag(node: ast.expr, owner: str) -> bool:
    """``owner.requires_grad``."""
    return isinstance(node, ast.Attribute) and node.attr == "requires_grad" and ast.unparse(node.value) == owner


def _written_flag_owner(stmt: ast.stmt | None) -> str | None:
    """``p`` of ``p.requires_grad = flag`` or ``p.requires_grad_(flag)``."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute) \
            and stmt.targets[0].attr == "requires_grad":
        return ast.unparse(stmt.targets[0].value)
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute) \
            and stmt.value.func.attr == "requires_grad_":
        return ast.unparse(stmt.value.func.value)
    return None


def _own_lines(text_lines: list[str], stmt: ast.stmt) -> str | None:
    """The indentation of ``stmt`` when it starts its first line and nothing but a comment follows it on its last,
    and it holds no string written over several lines: its lines can be removed or re-indented as a whole."""
    indent = _indent(text_lines, stmt)
    if indent is None or "\t" in indent or stmt.end_lineno is None or stmt.end_col_offset is None:
        return None
    rest = text_lines[stmt.end_lineno - 1].encode("utf-8")[stmt.end_col_offset:].decode("utf-8", "replace").strip()
    if rest and not rest.startswith("#") or any(isinstance(n, (ast.Constant, ast.JoinedStr)) and n.lineno != n.end_lineno
                                                for n in ast.walk(stmt)):
        return None
    return indent


def _drop_requires_grad_guard(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG103 ``p.requires_grad = flag`` (or ``p.requires_grad_(flag)``) guarded by ``p.requires_grad`` itself: the
    line froze parameters, a later call asked for True, and the guard skipped them, so a backward gave them no
    gradient (``probe/guarded_freeze.py``: the finding at the guard's test, the write as ``FROZE_NOTE``).  Drop the
    guard's test of the flag: ``if not p.requires_grad: continue`` removed, ``if p.requires_grad and c:`` ->
    ``if c:``, ``if p.requires_grad:`` (no else) replaced by its body.  Not offered when the probe saw the guard skip
    parameters frozen elsewhere too (``GUARD_SKIPS_OTHERS_NOTE``): those may be meant to stay frozen."""
    written = f.notes[0].site if f.notes and f.notes[0].message == FROZE_NOTE else None
    if f.code != "GG103" or written is None or written.path != f.site.path or _note(f, GUARD_SKIPS_OTHERS_NOTE):
        return None
    owner = _written_flag_owner(lines.simple_statement_at(written.line))
    guard = next((s for s in lines.statements_at(f.site.line) if isinstance(s, ast.If) and s.test.lineno == f.site.line
                  and s.test.col_offset + 1 == f.site.column), None)
    if owner is None or guard is None:
        return None
    source = text.splitlines()
    indent = _own_lines(source, guard)
    test = guard.test
    if indent is None or guard.end_lineno is None:
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _reads_flag(test.operand, owner) \
            and len(guard.body) == 1 and isinstance(guard.body[0], ast.Continue) and not guard.orelse \
            and guard.end_lineno < written.line:
        edits = (TextEdit(guard.lineno, 1, guard.end_lineno + 1, 1, ""),)
        shown = f"if not {owner}.requires_grad: continue"
    elif guard.lineno <= written.line <= guard.end_lineno and isinstance(test, ast.BoolOp) \
            and isinstance(test.op, ast.And) and sum(_reads_flag(v, owner) for v in test.values) == 1:
        kept = [ast.get_source_segment(text, v) for v in test.values if not _reads_flag(v, owner)]
        if any(k is None for k in kept) or test.end_lineno is None:
            return None
        kept = [f"({k})" if isinstance(v, (ast.BoolOp, ast.NamedExpr, ast.IfExp, ast.Lambda)) and len(kept) > 1 else k
                for k, v in zip(kept, (v for v in test.values if not _reads_flag(v, owner)))]
        edits = (TextEdit(test.lineno, _char_column(source, test.lineno, test.col_offset), test.end_lineno,
                          _char_column(source, test.end_lineno, test.end_col_offset), " and ".join(kept)),)
        shown = f"{owner}.requires_grad and"
    elif _reads_flag(test, owner) and not guard.orelse and guard.body[0].lineno > test.end_lineno \
            and guard.lineno <= written.line <= guard.end_lineno:
        inner = _indent(source, guard.body[0])
        if inner is None or not inner.startswith(indent) or inner == indent:
            return None
        cut = len(inner) - len(indent)
        edits = [TextEdit(guard.lineno, 1, guard.body[0].lineno, 1, "")]
        for k in range(guard.body[0].lineno, guard.end_lineno + 1):
            line = source[k - 1]
            if line.startswith(inner):
                edits.append(TextEdit(k, 1, k, cut + 1, ""))
            elif line.strip() and not line.lstrip().startswith("#"):
                return None  # a line of the body indented less than its first statement: leave its layout alone
        edits = tuple(edits)
        shown = f"if {owner}.requires_grad:"
    else:
        return None
    return Fix(f"Set the flag on every parameter: drop the guard `{shown}` (unsafe: parameters frozen elsewhere that "
               "the loop reaches are unfrozen too)", False, edits)


def _operand_names(op: ast.expr) -> list[ast.Name]:
    """The plain names ``op`` takes as its tensors: a binary operator's sides, a call's arguments, a method's
    receiver."""
    if isinstance(op, ast.BinOp):
        parts = [op.left, op.right]
    elif isinstance(op, ast.Call):
        parts = [*op.args, *(k.value for k in op.keywords)]
        if isinstance(op.func, ast.Attribute):
            parts.append(op.func.value)
    else:
        parts = []
    return [p for p in parts if isinstance(p, ast.Name)]


def _reads_through(value: ast.expr, receiver: str) -> bool:
    """``receiver.attr`` or ``receiver.method()`` (no arguments): a read of the object's state (in a branch of a
    conditional expression: the op's copy of another branch's value is the same values)."""
    if isinstance(value, ast.IfExp):
        return _reads_through(value.body, receiver) or _reads_through(value.orelse, receiver)
    if isinstance(value, ast.Call) and not value.args and not value.keywords:
        value = value.func
    return isinstance(value, ast.Attribute) and ast.unparse(value.value) == receiver


def _clone_state_read_for_setter(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG001 a call hands a value to an object's method that stores it in place into the object's tensor
    (``self.state.set(v)``, the probe's ``SETTER_NOTE``), which an op had read and saved before the call through a
    name bound to a read of the same object (``held = self.state.get()`` ... ``gate * held``): the op takes a copy
    (``gate * held.clone()``), so it keeps the values it read and the object's update stays in place.  Only when
    that name is bound once in the function, from a read through the very receiver of the call (``recv.attr`` or
    ``recv.method()``), before the op, and the op takes it once and no other name of that kind."""
    setter = _note(f, SETTER_NOTE)
    if f.code != "GG001" or setter is None or setter.path != f.site.path or len({s.site for s in f.saves}) != 1 \
            or f.saves[0].site is None or f.saves[0].site.path != f.site.path:
        return None
    stmt = lines.simple_statement_at(f.site.line)
    calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.lineno == f.site.line and n.col_offset + 1 == f.site.column] if stmt is not None else []
    op = _expression_at(lines, f.saves[0].site)
    if len(calls) != 1 or op is None or _the_write(lines, setter.line) is None:
        return None
    receiver = ast.unparse(calls[0].func.value)
    function = lines.function_of(stmt)
    op_stmt = lines.simple_statement_around(f.saves[0].site.line)
    if op_stmt is None or lines.function_of(op_stmt) is not function or not op_stmt.lineno < stmt.lineno:
        return None
    chosen = []
    for name in _operand_names(op):
        bindings = [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == name.id
                    and isinstance(n.ctx, (ast.Store, ast.Del))]
        binding = lines.simple_statement_at(bindings[0].lineno) if len(bindings) == 1 else None
        if isinstance(binding, ast.Assign) and len(binding.targets) == 1 and binding.targets[0] is bindings[0] \
                and binding.end_lineno is not None and binding.end_lineno < op.lineno \
                and _reads_through(binding.value, receiver):
            chosen.append(name)
    if len(chosen) != 1 or sum(1 for n in ast.walk(op) if isinstance(n, ast.Name) and n.id == chosen[0].id) != 1 \
            or chosen[0].end_lineno is None:
        return None
    name = chosen[0]
    column = _char_column(text.splitlines(), name.end_lineno, name.end_col_offset)
    return Fix(f"Read a copy of the state at the op: `{name.id}.clone()`", True,
               (TextEdit(name.end_lineno, column, name.end_lineno, column, ".clone()"),))


def _step_after_helper_backward(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG101 a plain ``<chain>.step()`` right before the call of a helper whose whole body is one backward through a
    graph built before the step (the probe places it at the call, the step as ``STEP_NOTE``, the backward inside the
    helper): move the step after that call.  The helper computes nothing but that backward, so it runs as it did,
    on the weights its graph saved; only the step now also applies the gradients it adds."""
    step_site = f.notes[0].site if f.notes and f.notes[0].message == STEP_NOTE else None
    if f.code != "GG101" or step_site is None or f.backward is None or step_site.path != f.site.path \
            or f.backward.path != f.site.path:
        return None
    step, call = lines.simple_statement_at(step_site.line), lines.simple_statement_at(f.site.line)
    inner = lines.simple_statement_at(f.backward.line)
    if not (isinstance(step, ast.Expr) and isinstance(step.value, ast.Call) and _is_step(step.value)
            and isinstance(call, ast.Expr) and isinstance(call.value, ast.Call) and is_dotted(call.value.func)
            and not call.value.args and not call.value.keywords and isinstance(inner, ast.Expr)):
        return None
    helper = lines.function_of(inner)
    name = call.value.func.attr if isinstance(call.value.func, ast.Attribute) else getattr(call.value.func, "id", "")
    backward = inner.value
    if not (isinstance(helper, ast.FunctionDef) and helper.name == name and helper.body == [inner]
            and not helper.decorator_list and isinstance(backward, ast.Call) and isinstance(backward.func, ast.Attribute)
            and backward.func.attr == "backward"
            and all(isinstance(a, ast.Constant) for a in [*backward.args, *(k.value for k in backward.keywords)])):
        return None
    block = _block_of(lines, step)
    if block is None or not any(a is step and b is call for a, b in zip(block, block[1:])):
        return None
    ctx = FixContext(text, lines.tree)
    try:
        ctx.require_own_lines(step)
        ctx.require_own_lines(call)
        edits = tuple(move_statements_after(ctx, [step], [step], call))
    except CannotFix:
        return None
    return Fix(f"Step after the backward: move `{ast.unparse(step)[:60]}` after `{ast.unparse(call)[:60]}` (unsafe: "
               "the step also applies the gradients that backward adds to its parameters)", False, edits)


def _optimizer_after_replacing_call(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG103 an optimizer made from a model's parameters right before a call that leads to a helper replacing
    submodules or parameters of that model (the probe places it at the optimizer's statement, the replacement as
    ``REPLACED_NOTE``, the call as ``REPLACING_CALL_NOTE``): the static finding's fix, ``build_optimizer_after``.
    Only for ``name = <call>(...)`` whose parameters argument reads them at that moment through a method of a name
    the call is handed (``model.parameters()``), bound just before the call in its block with nothing between naming
    the optimizer or rebinding what its construction reads (``stale_optimizers.built_just_before``, the static
    analysis's own test)."""
    call_site = _note(f, REPLACING_CALL_NOTE)
    if f.code != "GG103" or not f.notes or f.notes[0].message != REPLACED_NOTE or call_site is None:
        return None
    made, call = lines.simple_statement_at(f.site.line), lines.simple_statement_at(call_site.line)
    if not (isinstance(made, ast.Assign) and len(made.targets) == 1 and isinstance(made.targets[0], ast.Name)
            and isinstance(made.value, ast.Call) and call is not None):
        return None
    params = made.value.args[0] if made.value.args else next(
        (k.value for k in made.value.keywords if k.arg == "params"), None)
    handed = {n.id for n in ast.walk(call) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    reads_now = params is not None and any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
        and n.func.value.id in handed and not n.args and not n.keywords for n in ast.walk(params))
    scope = lines.function_of(made) or lines.tree
    if not reads_now or built_just_before(scope, {made.targets[0].id}, call) is not made:
        return None
    try:
        return build_optimizer_after(FixContext(text, lines.tree), made, call)
    except CannotFix:
        return None


# torch.nn.functional.batch_norm's parameters, in order
_BATCH_NORM = ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")


def _attached_batch_statistics(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG103 ``F.batch_norm(x, mean.detach(), var.detach(), w, b, training=False, eps=e)`` handed the input's own
    per-channel statistics (the probe compared them: ``probe/own_stats.py``, its ``OWN_STATS_NOTE``): torch does not
    differentiate through running statistics, so they were detached to get past its refusal, and the gradient through
    them is lost.  Normalise with tensor ops, the statistics attached, and keep the call for the affine part only
    (running statistics 0 and 1, eps 0: ``x * w + b``, whatever ``w`` and ``b`` are, None included):
    ``F.batch_norm(((x.movedim(1, -1) - mean) / torch.sqrt(var + e)).movedim(-1, 1), torch.zeros_like(mean),
    torch.ones_like(var), w, b, training=False, eps=0.0)`` -- the forward computes the same values, channels on
    dimension 1 as batch norm has them.  Only when both statistics are a plain name or attribute chain's own
    ``.detach()`` (a value with a graph, or the detach would not have been needed), training is a literal False or
    left out, and nothing is passed by ``*``/``**``.  Statistics computed without a graph otherwise (under
    ``torch.no_grad()`` in a helper, from ``.data``) are computed again from the input, attached, as the probe saw
    them: the per-channel mean and the variance of the kind its note names (biased or unbiased), over every dimension
    but 1 (``x.transpose(0, 1).flatten(1).var(1, correction=c)``), only when the input is a plain name or attribute
    chain (it is read three times)."""
    if f.code != "GG103" or not any(_note(f, note) is not None for note in OWN_STATS_NOTES):
        return None
    correction = 0 if _note(f, OWN_STATS_BIASED_NOTE) else 1 if _note(f, OWN_STATS_UNBIASED_NOTE) else None
    stmt = lines.simple_statement_around(f.site.line)
    ctx = FixContext(text, lines.tree)
    torch_name = ctx.torch_name()
    calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call)
             and ctx.qual(n.func) == "torch.nn.functional.batch_norm"] if stmt is not None else []
    if len(calls) != 1 or torch_name is None:
        return None
    call = calls[0]
    if len(call.args) > len(_BATCH_NORM) or any(isinstance(a, ast.Starred) for a in call.args) \
            or any(k.arg not in _BATCH_NORM for k in call.keywords):
        return None
    given = {**dict(zip(_BATCH_NORM, call.args)), **{k.arg: k.value for k in call.keywords}}
    if len(given) != len(call.args) + len(call.keywords):
        return None  # a parameter given twice
    training = given.get("training")
    stats = [given.get("running_mean"), given.get("running_var")]
    if given.get("input") is None or training is not None and not (
            isinstance(training, ast.Constant) and training.value is False):
        return None
    detached = all(isinstance(s, ast.Call) and isinstance(s.func, ast.Attribute) and s.func.attr == "detach"
                   and not s.args and not s.keywords and is_dotted(s.func.value) for s in stats)
    if not detached and (correction is None or not all(s is not None and is_dotted(s) for s in stats)
                         or not is_dotted(given["input"])):
        return None  # (a call computing them, kept only for their shapes, could do more than compute them)
    source = text.splitlines()

    def segment(node: ast.expr) -> str:
        return ast.get_source_segment(text, node) or ast.unparse(node)

    def replacing(node: ast.expr, new: str) -> TextEdit:
        return TextEdit(node.lineno, _char_column(source, node.lineno, node.col_offset), node.end_lineno,
                        _char_column(source, node.end_lineno, node.end_col_offset), new)

    eps = given.get("eps")
    x = segment(given["input"])
    if detached:
        mean, var = (segment(s.func.value) for s in stats)
    else:  # computed again from the input, attached; the passed ones give only the shapes
        mean, var = (f"{x}.transpose(0, 1).flatten(1).{op}" for op in ("mean(1)", f"var(1, correction={correction})"))
    if not isinstance(given["input"], (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
        x = f"({x})"
    normed = (f"(({x}.movedim(1, -1) - {mean}) / {torch_name}.sqrt({var} + "
              f"{segment(eps) if eps is not None else '1e-05'})).movedim(-1, 1)")
    shapes = (mean, var) if detached else (segment(stats[0]), segment(stats[1]))
    edits = [replacing(given["input"], normed), replacing(stats[0], f"{torch_name}.zeros_like({shapes[0]})"),
             replacing(stats[1], f"{torch_name}.ones_like({shapes[1]})")]
    if eps is not None:
        edits.append(replacing(eps, "0.0"))
    else:
        last = max([*call.args, *(k.value for k in call.keywords)], key=lambda n: (n.end_lineno, n.end_col_offset))
        at = _char_column(source, last.end_lineno, last.end_col_offset)
        edits.append(TextEdit(last.end_lineno, at, last.end_lineno, at, ", eps=0.0"))
    said = (f"the statistics attached: `(x - {mean}) / sqrt({var} + eps)`" if detached else
            f"the statistics computed again from `{x}`, attached: `(x - mean) / sqrt(var + eps)`")
    return Fix(f"Normalise with {said} by tensor ops, batch norm for the affine part only (unsafe: the gradient now "
               "flows through the statistics)", False, tuple(sorted(edits, key=lambda e: (e.line, e.column))))


def _allocation(node: ast.expr) -> bool:
    """``torch.zeros(n, d)``, ``x.new_zeros(n, d)``, ``torch.zeros(...).float()``: a new tensor, no history."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CONVERSIONS \
            and not isinstance(node.func.value, ast.Name):
        node = node.func.value
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ALLOCATIONS
            and (node.func.attr.startswith("new_") or ast.unparse(node.func.value) == "torch")
            and not any(k.arg == "requires_grad" for k in node.keywords))


def _row_index(node: ast.expr, function: ast.AST) -> bool:
    """An index that picks one row: an int literal, or a name ``function`` binds only as the counter of ``for i in
    range(...)`` or ``for i, _ in enumerate(...)``."""
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if not isinstance(node, ast.Name):
        return False
    counters = {id(loop.target if isinstance(loop.target, ast.Name) else loop.target.elts[0])
                for loop in ast.walk(function) if isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call)
                and isinstance(loop.iter.func, ast.Name) and (
                    loop.iter.func.id == "range" and isinstance(loop.target, ast.Name)
                    or loop.iter.func.id == "enumerate" and isinstance(loop.target, ast.Tuple)
                    and len(loop.target.elts) == 2 and isinstance(loop.target.elts[0], ast.Name))}
    stores = [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == node.id
              and not isinstance(n.ctx, ast.Load)]
    return bool(stores) and all(id(n) in counters for n in stores)


def _buffer_uses(tree: ast.Module, buffer: ast.expr, write: ast.stmt) -> list[ast.expr] | None:
    """Every use of the buffer the write ``buffer[...] = ...`` fills: each ``name`` node of the write's function (a
    local, not a parameter), or each ``self.attr`` of the write's class (an attribute no other code of the file
    names); None when it cannot be told."""
    around = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
              and n.lineno <= write.lineno and write.end_lineno <= n.end_lineno]
    functions = [n for n in around if not isinstance(n, ast.ClassDef)]
    if isinstance(buffer, ast.Name) and functions:
        function = max(functions, key=lambda n: n.lineno)
        args = function.args
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
        if buffer.id in params \
                or any(isinstance(n, (ast.Global, ast.Nonlocal)) and buffer.id in n.names for n in ast.walk(function)):
            return None
        return [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == buffer.id]
    classes = [n for n in around if isinstance(n, ast.ClassDef)]
    if not (isinstance(buffer, ast.Attribute) and isinstance(buffer.value, ast.Name) and buffer.value.id == "self"
            and classes):
        return None
    owner = max(classes, key=lambda n: n.lineno)
    named = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == buffer.attr]
    inside = {id(n) for n in ast.walk(owner)}
    if any(id(n) not in inside or not (isinstance(n.value, ast.Name) and n.value.id == "self") for n in named):
        return None
    return named


def _inside(node: ast.AST, around: ast.AST) -> bool:
    return any(n is node for n in ast.walk(around))


def _buffer_rows_apart(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG101 values of several graphs written in place into the rows of one buffer (``preds[k] = head(x)``,
    ``self.values[i][t] = value``), where a graph built after an optimizer step reads one row and its backward runs
    through every write into the buffer, into a graph whose saved weights the step changed (the probe places it at
    the write, the read as ``BUFFER_READ_NOTE``).  Keep each row in a tensor of its own: the buffer becomes the list
    of its rows, cloned (``[row.clone() for row in torch.zeros(...)]``), and a write of a whole row copies into that
    row (``preds[k][...] = v``), so every row holds the values it held, and a row's backward reaches only the writes
    into it.  Only for a buffer made once by a call that makes a new tensor with no history (``torch.zeros``,
    ``x.new_zeros``) in the write's function or class, whose every use picks one row (``buf[k]``, ``k`` an int or
    a ``range``/``enumerate`` counter), and only so (a list display assigned to the name elsewhere is left alone)."""
    read = _note(f, BUFFER_READ_NOTE)
    write = lines.simple_statement_at(f.site.line)
    if f.code != "GG101" or read is None or not isinstance(write, ast.Assign) or len(write.targets) != 1:
        return None
    row = write.targets[0]
    if not isinstance(row, ast.Subscript):
        return None
    while isinstance(row.value, ast.Subscript):
        row = row.value
    uses = _buffer_uses(lines.tree, row.value, write) if is_dotted(row.value) else None
    if not uses:
        return None
    parents = {id(child): node for node in ast.walk(lines.tree) for child in ast.iter_child_nodes(node)}
    made, stores = [], []
    for use in uses:
        parent = parents.get(id(use))
        if isinstance(parent, ast.Assign) and any(t is use for t in parent.targets):
            if len(parent.targets) != 1:
                return None
            if _allocation(parent.value):
                made.append(parent)
            elif not isinstance(parent.value, (ast.List, ast.ListComp)):
                return None
            continue
        if not (isinstance(parent, ast.Subscript) and parent.value is use
                and _row_index(parent.slice, lines.function_of(lines.statements_at(use.lineno)[-1]))):
            return None
        if isinstance(parent.ctx, ast.Store):
            holder = parents.get(id(parent))
            if not (isinstance(holder, ast.Assign) and len(holder.targets) == 1 and holder.targets[0] is parent):
                return None
            stores.append(parent)
        elif not isinstance(parent.ctx, ast.Load):
            return None
    if len(made) != 1 or made[0].value.end_lineno is None:
        return None
    if stores:
        # A whole-row write becomes a copy into the row: it must only ever write the buffer made here, never a list
        # the name holds on another path (`buf = [None] * n`), so it follows the buffer in the block that makes it,
        # with no list bound to the name there.
        block = _block_of(lines, made[0]) or []
        k = next((n for n, st in enumerate(block) if st is made[0]), None)
        region = block[k + 1:] if k is not None else []
        lists = [u for u in uses if isinstance(parents.get(id(u)), ast.Assign) and parents[id(u)] is not made[0]]
        if not all(any(_inside(store, top) for top in region) for store in stores) \
                or any(_inside(u, top) for u in lists for top in region):
            return None
    source = text.splitlines()
    value = made[0].value
    start = _char_column(source, value.lineno, value.col_offset)
    end = _char_column(source, value.end_lineno, value.end_col_offset)
    edits = [TextEdit(value.lineno, start, value.lineno, start, "[row.clone() for row in "),
             TextEdit(value.end_lineno, end, value.end_lineno, end, "]")]
    for store in stores:
        column = _char_column(source, store.end_lineno, store.end_col_offset)
        edits.append(TextEdit(store.end_lineno, column, store.end_lineno, column, "[...]"))
    name = ast.unparse(row.value)
    return Fix(f"Keep the buffer's rows in separate tensors: `{name} = [row.clone() for row in ...]` (unsafe: `{name}` "
               "is now a list of its rows; code that uses it as one tensor elsewhere breaks)", False,
               tuple(sorted(edits, key=lambda e: (e.line, e.column))))


def _called_on(stmt: ast.stmt, method: str) -> str | None:
    """``opt`` of a statement ``opt.<method>()`` (no arguments), ``opt`` a chain; else None."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == method \
            and not call.args and not call.keywords and is_dotted(call.func.value):
        return ast.unparse(call.func.value)
    return None


def _network_of(tree: ast.Module, optimizer: str) -> str | None:
    """``net`` of the one assignment ``<optimizer> = <torch.optim.X>(net.parameters(), ...)`` of the file (``net`` a
    chain), or None."""
    made = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and len(n.targets) == 1
            and ast.unparse(n.targets[0]) == optimizer]
    if len(made) != 1 or not isinstance(made[0], ast.Call) or not made[0].args:
        return None
    params = made[0].args[0]
    if not (isinstance(params, ast.Call) and isinstance(params.func, ast.Attribute) and params.func.attr == "parameters"
            and not params.args and not params.keywords and is_dotted(params.func.value)):
        return None
    return ast.unparse(params.func.value)


def _inputs_from_arguments(ctx: FixContext, function: ast.AST, before: list[ast.stmt], network: str) -> bool:
    """Whether every call of ``network`` in ``before`` (statements of ``function``'s block, in order) takes only the
    function's arguments, constants, and names those statements bind from them by torch calls and operators: no
    other network's output can reach its input."""
    args = function.args if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    plain = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.arg != "self"} if args else set()

    def from_arguments(node: ast.expr) -> bool:
        for n in ast.walk(node):
            if isinstance(n, ast.Call) and not (ctx.qual(n.func) or "").startswith("torch.") \
                    and not (isinstance(n.func, ast.Attribute) and n.func.attr in TENSOR_NAMES
                             and not n.func.attr.endswith("_")):
                return False
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in plain \
                    and n.id not in ctx.imports:
                return False
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
                return False
        return True

    for st in before:
        for n in ast.walk(st):
            if isinstance(n, ast.Call) and ast.unparse(n.func) == network \
                    and not all(from_arguments(a) for a in [*n.args, *(k.value for k in n.keywords)]):
                return False
        if isinstance(st, ast.Assign) and _assigns_names(st) and from_arguments(st.value):
            plain |= _names_stored(st)
        else:  # a name bound otherwise is no argument's any more
            plain -= {n.id for n in ast.walk(st) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    return True


def _backward_into_next_step(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG101 an optimizer step (``S.step()``) between a forward and the backward of a loss that another optimizer's
    step applies next (``O.zero_grad()``, ``loss.backward()``, ``O.step()``), built after the step on a value whose
    graph saved the weights ``S`` changed (the probe places it at the step, the use as ``STALE_USE_NOTE``, or at the
    use, the step as ``STEP_NOTE``; the use lies between the step and the backward, in their block): a
    discriminator's loss scored on the generator's output from before the generator's step.  Backpropagate only into
    the parameters ``O`` applies: ``loss.backward(inputs=[...])`` over ``O``'s param groups, so backward never enters
    the graph of ``S``'s network, whose gradients there nothing applies.  Only when, in one block, ``S``'s
    ``zero_grad()`` comes before its step (what this backward would add to its gradients is cleared before ``S``
    applies any), nothing after the backward in the function steps ``S``, runs another backward or reads a gradient
    but of ``O``'s network's parameters, and ``S``'s network (``S = torch.optim.X(net.parameters())``) is called on
    the function's arguments only (``O``'s network's output cannot reach it, or backward would still run through it
    to reach ``O``'s parameters)."""
    first = f.notes[0] if f.notes else None
    if first is None or first.site.path != f.site.path:
        return None
    if first.message == STALE_USE_NOTE:  # placed at the step
        step_site, use = f.site, first.site
    elif first.message == STEP_NOTE and first.site.line < f.site.line:  # placed at the use, after the step
        step_site, use = first.site, f.site
    else:
        return None
    if f.code != "GG101" or f.backward is None or f.backward.path != f.site.path:
        return None
    step, backward = lines.simple_statement_at(step_site.line), lines.simple_statement_at(f.backward.line)
    if not (isinstance(step, ast.Expr) and isinstance(step.value, ast.Call) and _is_step(step.value)
            and isinstance(backward, ast.Expr) and _plain_backward(backward.value) and not backward.value.args
            and all(k.arg == "retain_graph" for k in backward.value.keywords)):
        return None
    block = _block_of(lines, step)
    if block is None or not any(st is backward for st in block):
        return None
    i, j = next(n for n, st in enumerate(block) if st is step), next(n for n, st in enumerate(block) if st is backward)
    if not any(st.lineno <= use.line <= st.end_lineno for st in block[i + 1:j + 1]):
        return None
    stepped = ast.unparse(step.value.func.value)
    optimizer = _called_on(block[j + 1], "step") if i < j < len(block) - 1 else None
    if optimizer in (None, stepped) or not any(_called_on(st, "zero_grad") == optimizer for st in block[i + 1:j]) \
            or not any(_called_on(st, "zero_grad") == stepped for st in block[:i]):
        return None
    function = lines.function_of(step)
    network, other = _network_of(lines.tree, stepped), _network_of(lines.tree, optimizer)
    ctx = FixContext(text, lines.tree)
    if network is None or other is None or not _inputs_from_arguments(ctx, function, block[:j], network):
        return None
    # After the backward: no other backward, no step of `S`, and gradients read only of `O`'s network.
    for st in (n for n in ast.walk(function) if isinstance(n, ast.stmt) and n.lineno > backward.end_lineno):
        chains = {ast.unparse(n) for n in ast.walk(st) if isinstance(n, (ast.Attribute, ast.Name))}
        if _runs_backward(st) or stepped in chains or any(isinstance(n, ast.Attribute) and n.attr == "grad"
                                                          for n in ast.walk(st)) and (network in chains
                                                                                      or other not in chains):
            return None
    call = backward.value
    source = text.splitlines()
    end = _char_column(source, call.end_lineno, call.end_col_offset - 1)
    inputs = f'inputs=[p for group in {optimizer}.param_groups for p in group["params"] if p.requires_grad]'
    edit = TextEdit(call.end_lineno, end, call.end_lineno, end, (", " if call.keywords else "") + inputs)
    return Fix(f"Backpropagate only into the parameters `{optimizer}.step()` applies: `backward(inputs=...)` over its "
               f"param groups (unsafe: the backward no longer adds gradients to other tensors, such as "
               f"`{network}`'s parameters)", False, (edit,))


def _use_and_step(f: ProbeFinding) -> tuple[Site, Site] | None:
    """Where a GG101's graph built after a step takes the value from before it, and the step, as the probe names them:
    a read of a buffer (``BUFFER_READ_NOTE``, the step ``STEP_NOTE``), a use placed as a note of the step
    (``STALE_USE_NOTE``), or a use placed at the finding's own line (its first note the step, which comes after it)."""
    if f.code != "GG101" or not f.notes:
        return None
    first, read = f.notes[0], _note(f, BUFFER_READ_NOTE)
    if read is not None and _note(f, STEP_NOTE) is not None:
        return read, _note(f, STEP_NOTE)
    if first.message == STALE_USE_NOTE:
        return first.site, f.site
    if first.message == STEP_NOTE and first.site.line > f.site.line:
        return f.site, first.site
    return None


def _forward_each_iteration(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG101 a loop whose body builds a loss on a value computed once before the loop, runs its backward, then an
    optimizer step that updates weights that value's graph saved: the next iteration's backward runs into that
    graph (the probe names the use, before the step in the body, and the step).  Compute the value at the top of the
    loop's body instead, so that each iteration's graph is made with the weights the steps before it made (a fresh
    forward per step).  Only when the use reads one name whose binding before the loop (the last in the loop's
    block) is a plain ``name = ...`` that makes the saves the probe saw (they lie in it, or in a function of the
    file it calls by name) from values (no call but torch's inside its calls' arguments: ``enc(next(batches))``
    would draw a new batch in every iteration); nothing reads the name outside the loop's body; the loop rebinds
    nothing that statement reads; and what runs between it and the loop only computes values (it would otherwise
    run before the moved statement)."""
    sites = _use_and_step(f)
    if sites is None or f.backward is None or any(s.path != f.site.path for s in (*sites, f.backward)):
        return None
    use, step_site = sites
    step, backward = lines.simple_statement_at(step_site.line), lines.simple_statement_around(f.backward.line)
    if not (isinstance(step, ast.Expr) and isinstance(step.value, ast.Call) and _is_step(step.value)) \
            or backward is None:
        return None
    loop = next((s for s in reversed(lines.statements_at(step.lineno)) if isinstance(s, (ast.For, ast.While))), None)
    if loop is None or loop.orelse:
        return None
    tops = [next((k for k, st in enumerate(loop.body) if st.lineno <= line <= st.end_lineno), None)
            for line in (use.line, backward.lineno, step.lineno)]
    if None in tops or not tops[0] <= tops[1] < tops[2] or loop.body[tops[2]] is not step:
        return None
    expr = _expression_at(lines, use)
    if expr is None:
        return None
    taken = [*expr.args, *(k.value for k in expr.keywords)] if isinstance(expr, ast.Call) else [expr]
    names = set().union(*(statements.names_read(a) for a in taken))
    function = lines.function_of(loop)
    block = _block_of(lines, loop) or []
    k = next((n for n, st in enumerate(block) if st is loop), None)
    chosen = [(name, made) for name in sorted(names) if k is not None
              and (made := next((st for st in reversed(block[:k]) if name in statements.names_bound(st)), None))
              is not None and _makes_saves(lines, made, f)]
    if len(chosen) != 1:
        return None
    name, made = chosen[0]
    if not (isinstance(made, ast.Assign) and len(made.targets) == 1 and isinstance(made.targets[0], ast.Name)
            and statements.calls(made.value)) or name in statements.names_read(made.value):
        return None
    reads = statements.names_read(made.value)
    ctx = FixContext(text, lines.tree)
    if any(isinstance(n, ast.Call) and not (ctx.qual(n.func) or "").startswith("torch.")
           and not (isinstance(n.func, ast.Attribute) and n.func.attr in TENSOR_NAMES and not n.func.attr.endswith("_"))
           for c in statements.calls(made.value) for a in [*c.args, *(kw.value for kw in c.keywords)]
           for n in ast.walk(a)):
        return None
    between = block[block.index(made) + 1:k]
    body = ast.Module(body=loop.body, type_ignores=[])
    in_body = {id(n) for n in ast.walk(body)}
    if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and id(n) not in in_body
           for n in ast.walk(function)) \
            or any(isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Global,
                                  ast.Nonlocal)) and n is not function and name in statements.names(n)
                   for n in ast.walk(function)):
        return None  # read elsewhere, or seen by a nested scope
    changed = statements.names_bound(loop.target) if isinstance(loop, ast.For) else set()
    for st in loop.body:
        changed |= statements.names_bound(st) | _stored_into_names(st)
    if changed & reads or any(not _values_only(ctx, function, st) or statements.names_bound(st) & (reads | {name})
                              or name in statements.names_read(st) for st in between):
        return None
    source = text.splitlines()
    outer, inner = _own_lines(source, made), _indent(source, loop.body[0])
    if outer is None or inner is None or made.end_lineno is None:
        return None
    moved = "".join(inner + line[len(outer):] + "\n" if line.strip() else "\n"
                    for line in source[made.lineno - 1:made.end_lineno])
    first = loop.body[0].lineno
    edits = (TextEdit(made.lineno, 1, made.end_lineno + 1, 1, ""), TextEdit(first, 1, first, 1, moved))
    shown = source[made.lineno - 1].strip()
    return Fix(f"Compute `{shown[:60]}` in the loop, before each backward, so that each iteration's graph sees the "
               "weights the steps before it made (unsafe: that forward now runs in every iteration, with the "
               "updated weights)", False, edits)


def _stored_into_names(st: ast.stmt) -> set[str]:
    """Names whose object ``st`` changes in place: through an item or attribute (``x[i] = v``) or an in-place
    method (``x.mul_(2)``)."""
    out = set()
    for n in ast.walk(st):
        root = n.func.value if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) \
            and n.func.attr.endswith("_") and not n.func.attr.startswith("_") else \
            n if isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del)) else None
        root = chain_base(root)
        if isinstance(root, ast.Name):
            out.add(root.id)
    return out


def _makes_saves(lines: _Lines, made: ast.stmt, f: ProbeFinding) -> bool:
    """Whether the saves the probe saw lie in ``made`` or in functions of the file it calls by a plain name."""
    called = {c.func.id for c in statements.calls(made) if isinstance(c.func, ast.Name)}
    methods = {c.func.attr for c in statements.calls(made) if isinstance(c.func, ast.Attribute)
               and isinstance(c.func.value, ast.Name) and c.func.value.id == "self"}
    owner = next((c for c in ast.walk(lines.tree) if isinstance(c, ast.ClassDef) and c.lineno < made.lineno
                  <= (c.end_lineno or c.lineno) and any(d is lines.function_of(made) for d in c.body)), None)
    defs = [n for n in lines.tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in called]
    defs += [n for n in (owner.body if owner is not None else ()) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
             and n.name in methods]
    sites = [s.site for s in f.saves if s.site is not None]
    return bool(sites) and all(s.path == f.site.path and any(
        d.lineno <= s.line <= (d.end_lineno or d.lineno) for d in [made, *defs]) for s in sites)


def _method_again_before_backward(lines: _Lines, text: str, f: ProbeFinding) -> Fix | None:
    """GG101 an optimizer step updated weights saved by graphs a method of the object made (``self.forward()``
    storing its outputs on ``self``), and the run ended with those graphs still alive (``pending``): a later
    statement of the step's block calls a method of the object that backpropagates a loss read from attributes that
    method stores (``self.backward_G_alone()``), which would run into them.  Call the method again just before that
    statement, after the steps, so that its graphs are made with the updated weights (the thread's fix of a
    multi-loss GAN update).  Only when exactly one method of the class, taking ``self`` alone, holds every save the
    probe saw (in its body, or in a method it calls on ``self``), its body and theirs only assign and return (no
    step, backward or in-place write), the step is a plain statement of a block in another method of that class, and nothing between
    the step and that statement calls it."""
    if f.code != "GG101" or not f.saves or any(s.site is None or s.site.path != f.site.path for s in f.saves):
        return None
    # pending: placed at the step; raised: placed at the call that backpropagates, the step its first note
    placed = f.notes[0].site if f.kind == "raised" and f.notes and f.notes[0].message == STEP_NOTE else None
    if f.kind != "pending" and (placed is None or placed.path != f.site.path or placed.line >= f.site.line):
        return None
    step = lines.simple_statement_at((placed or f.site).line)
    at = lines.simple_statement_at(f.site.line) if placed is not None else None
    if not (isinstance(step, ast.Expr) and isinstance(step.value, ast.Call) and _is_step(step.value)):
        return None
    owner = next((c for c in ast.walk(lines.tree) if isinstance(c, ast.ClassDef)
                  and any(d is lines.function_of(step) for d in c.body)), None)
    block = _block_of(lines, step)
    if owner is None or block is None:
        return None
    methods = {d.name: d for d in owner.body if isinstance(d, ast.FunctionDef)}

    def on_self(node: ast.AST) -> set[str]:
        return {c.func.attr for c in statements.calls(node) if isinstance(c.func, ast.Attribute)
                and isinstance(c.func.value, ast.Name) and c.func.value.id == "self" and c.func.attr in methods}

    def reach(d: ast.FunctionDef) -> list[ast.FunctionDef]:
        return [d, *(methods[m] for m in sorted(on_self(d)))]

    def holds(d: ast.FunctionDef) -> bool:
        return all(any(r.lineno <= s.site.line <= (r.end_lineno or r.lineno) for r in reach(d)) for s in f.saves)

    def assigns_only(d: ast.FunctionDef) -> bool:
        return all(isinstance(st, (ast.Assign, ast.Return)) for r in reach(d) for st in r.body) and not any(
            isinstance(c.func, ast.Attribute) and (c.func.attr in ("backward", "step", "zero_grad")
                                                   or c.func.attr.endswith("_") and not c.func.attr.startswith("_"))
            for r in reach(d) for c in statements.calls(r))

    def stored(d: ast.FunctionDef) -> set[str]:
        return {t.attr for st in d.body for t in ast.walk(st) if isinstance(t, ast.Attribute)
                and isinstance(t.ctx, ast.Store) and isinstance(t.value, ast.Name) and t.value.id == "self"}

    makers = [d for d in methods.values() if [a.arg for a in d.args.args] == ["self"] and not d.decorator_list
              and not (d.args.vararg or d.args.kwarg or d.args.kwonlyargs or d.args.posonlyargs)
              and d is not lines.function_of(step) and holds(d) and assigns_only(d)]
    if len(makers) != 1:
        return None
    maker = makers[0]
    # A save in a method the maker calls: every other caller of that method backpropagates its own graphs.
    helpers = {m for m in on_self(maker) if any(methods[m].lineno <= s.site.line <= (methods[m].end_lineno or 0)
                                                for s in f.saves)}
    if any(helpers & on_self(d) and not _runs_backward(d) for d in methods.values() if d is not maker):
        return None
    made = stored(maker)
    i = next(k for k, st in enumerate(block) if st is step)
    for st in block[i + 1:]:
        if maker.name in on_self(st):
            return None  # made again already
        called = [methods[m] for m in on_self(st)]
        reads = {n.attr for d in called for n in ast.walk(d) if isinstance(n, ast.Attribute)
                 and isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name) and n.value.id == "self"}
        if at is not None and st is not at:
            continue
        if isinstance(st, ast.Expr) and called and reads & made and any(_runs_backward(d) for d in called):
            indent = _indent(text.splitlines(), st)
            if indent is None:
                return None
            edit = TextEdit(st.lineno, 1, st.lineno, 1, f"{indent}self.{maker.name}()\n")
            return Fix(f"Call `self.{maker.name}()` again after the step, so that the backward of "
                       f"`{ast.unparse(st)[:60]}` runs through graphs made with the updated weights (unsafe: every "
                       f"attribute `{maker.name}` sets is computed again, random draws too)", False, (edit,))
    return None


EDITS: tuple[Callable[[_Lines, str, ProbeFinding], Fix | None], ...] = (
    _zero_grad_before_backward, _keep_loaded_copy, _clone_kept_hook_output, _clone_pieces, _clone_rows_of_leaf,
    _step_after_stale_backward,
    _grad_on_for_dead_term, _grad_on_for_loss_in_block, _drop_requires_grad_guard, _clone_state_read_for_setter,
    _step_after_helper_backward, _optimizer_after_replacing_call,
    _attached_batch_statistics, _grad_on_for_decorated_call, _buffer_rows_apart,
    _backward_into_next_step, _forward_each_iteration, _method_again_before_backward)


def finding_of(lines: _Lines, f: ProbeFinding) -> Finding | None:
    """The typed finding a rule's fix builder reads for the probe's finding ``f``, or None for no known shape."""
    for shape in SHAPES:
        built = shape(lines, f)
        if built is not None:
            return built
    return None


# --- attaching them ---------------------------------------------------------------------------------------------

def probe_only(result: FileResult) -> Iterator[ProbedDiagnostic]:
    """The findings of ``result`` only the probe made, in ``result``'s own file, without a fix yet."""
    for d in result.diagnostics:
        if isinstance(d, ProbedDiagnostic) and d.probe is not None and d.fix is None and d.path == result.path:
            yield d


def fixes_for(text: str, path: str, diagnostics: list[ProbedDiagnostic]) -> dict[int, Fix]:
    """The fix of each of ``diagnostics`` (probe-only findings of ``text``) that has one, by ``id``."""
    parsed = parsing.parse(text)
    if isinstance(parsed, parsing.SyntaxProblem) or unavailable() is not None:
        return {}
    lines = _Lines(parsed)
    fixer = Fixer(text, parsed, path, FIX_BUILDERS)
    out: dict[int, Fix] = {}
    writes: dict[int, list[Mutation]] | None = None
    for d in diagnostics:
        try:
            finding = finding_of(lines, d.probe)
            if finding is not None and finding.mutation is not None and finding.mutation.moment is None:
                if writes is None:
                    writes = {}
                    analyze_module(parsed, path, text.splitlines(), use_jedi=False, writes=writes)
                _as_the_runs_saw(finding.mutation, writes.get(id(finding.mutation.node), []))
            if finding is None:
                fix = next((built for form in EDITS if (built := form(lines, text, d.probe)) is not None), None)
            elif "saved" in finding.data:  # checked against the saves the probe saw
                fix = Fixer(text, parsed, path, FIX_BUILDERS, _saves_still_before(finding)).fix(finding)
            else:
                fix = fixer.fix(finding) if finding is not None else None
        except Exception:  # noqa: BLE001 - as in the fix layer: a bug here loses the fix, never the finding
            log.debug("fix of the probe's %s at %s:%s failed", d.code, path, d.line, exc_info=True)
            fix = None
        if fix is not None and fix.edits:
            out[id(d)] = fix
    return out


def _as_the_runs_saw(mutation: Mutation, runs: list[Mutation]) -> None:
    """The probe's write with what the static analysis's runs of the same write knew (``Mutation.moment``: who held
    its memory then, what reads it after, the calls that led there): of the analyses that ran it, the one whose runs
    saw the most variables hold that memory (the others' through calls, ``Moment.elsewhere``); left without when none
    ran it (the fixes then take anyone for a reader)."""
    moments = sorted((m.moment for m in runs if m.moment is not None and m.moment.holders is not None),
                     key=lambda m: (-len(m.held_in_any_run()), len(m.frames)))
    if moments:
        mutation.moment = replace(moments[0], elsewhere=tuple(m for m in moments[1:] if m.log is not moments[0].log))


def _text(path: Path | None) -> str | None:
    try:
        text = parsing.decode(path.read_bytes()) if path is not None else None
    except OSError:
        return None
    return text if isinstance(text, str) else None


def attach(results: list[FileResult], paths: Mapping[str, Path]) -> list[FileResult]:
    """``results`` with a fix on each probe-only finding that has one; ``paths``: each result's file by its display
    path (a file that cannot be read again keeps its findings without fixes)."""
    out = []
    for result in results:
        asked = list(probe_only(result))
        text = _text(paths.get(result.path)) if asked else None
        if not asked or text is None:
            out.append(result)
            continue
        built = fixes_for(text, result.path, asked)
        built.update(_fixes_of_confirmed(result, [d for d in asked if id(d) not in built]))
        out.append(replace(result, diagnostics=[d.with_fix(built.get(id(d))) for d in result.diagnostics])
                   if built else result)
    return out


def _fixes_of_confirmed(result: FileResult, asked: list[ProbedDiagnostic]) -> dict[int, Fix]:
    """A probe-only finding also reported at the line to change, in the file of the static finding it confirmed
    (``ProbedDiagnostic.confirms``; a GG101 placed at the stale value's use, which the static analysis reports at
    the statement to move): that finding's fix, which repairs the same conflict torch saw."""
    static = {(d.code, d.line): d.fix for d in result.diagnostics
              if not (isinstance(d, ProbedDiagnostic) and d.probe is not None) and d.fix is not None}
    # Not one the probe placed at the step, the use its note (STALE_USE_NOTE): moving that step is the probe's own
    # recipe's to offer or refuse (`_step_after_stale_backward`), not another repair's of the same conflict.
    return {id(d): static[d.confirms] for d in asked if d.confirms in static
            and not (d.probe.notes and d.probe.notes[0].message == STALE_USE_NOTE)}
