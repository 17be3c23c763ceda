"""Issue 26, "the code is one analysis", as ceilings that only go down.

The fixes and the rules ask the facts the analysis already computed (the name index ``FixContext.names_in``, the
statements index, the engine's events, the run's sharing facts) instead of walking a scope's syntax again, and
``fixes/`` is an edit toolkit of modules one can read through.  Each number below is where the code stands: a change
that lowers one lowers its ceiling here; none is raised.  (The issue's targets: ``ast.walk(`` at most 30 times in
``fixes/`` and ``rules/``, ``fixes/`` at most 2,600 lines with no module over 450, ``fixes/aliases.py`` gone.)
A new fix form that does not fit goes into a module of its own, and asks the facts rather than walking the code."""

from __future__ import annotations

from pathlib import Path

import gradguard

PACKAGE = Path(gradguard.__file__).resolve().parent
FIXES, RULES = PACKAGE / "fixes", PACKAGE / "rules"

AST_WALKS = 21  # ``ast.walk(`` in fixes/ and rules/ (116 at the start of session 18, 50 at its end; 45 -> 24 in session 22:
# the names a subtree reads or binds, a number written out and the calls of a statement are asked of ``statements``,
# the names of a closure's write of its index; session 24: the sharing report's second per-scope name index goes
# (-2); session 25: wrappers ask the run's places (-1); the target: 30)
FIXES_LINES = 2_650  # lines of fixes/ (3,819 at the start of session 18, 3,950 at its end: the name index rules ask,
# module headers split from context.py and callers.py, new fix forms; session 19: the alias report of a write the run
# saw is the run's, and the syntactic read probe goes; session 20: the sharing Report moves to inference/sharing.py
# (-33), the run's moment is handed to the checks of a helper's callers, InPlaceWrite.at_call (+12); session 21:
# GG001's fix asks the run's facts, not aliases.py, which only InPlaceWrite's writes no run reached still ask;
# a home of the written tensor that is a parameter (`self`) counts as read after (+5); the probe's writes (no run)
# find the saved operand by the code's aliases again, as before GG001 stopped asking aliases.py (+7);
# session 22: the planner's pass is one function (plan.make_pass) that an editor's quick fix is checked with too (+8); a
# finding placed in another module is fixed there, by that module's Fixer, and FixContext.own refuses a node of
# another file than the one a fix edits (+27); the editor's view of such a finding offers that fix, naming
# its file (+7); aliases.py goes (-569): a caller's call no run of this analysis made is asked of the other units'
# runs of the same write (Moment.elsewhere), the probe's write of the static analysis's runs of it;
# a function's arguments read from its fields, moves asks statements for a statement's names (-3);
# inplace.py split along its seam (rebinding the written name, inplace.py; reading a copy after the write,
# copies.py: +9 for the new module's header and imports, less the out-of-place call and the "bound to another name"
# check each said once);
# the closure rebinding GG001 and GG004 each built is one helper in callers.py (+3); the work budget goes with
# the alias analysis it bounded (-15); no copy of a parameter a caller passes as a list (+8); session 23: the sharing
# report's index drops the own-code loads and bindings only aliases.py asked (-22), GG107's fix and compute_on_copy
# share where the copy starts and how the reads read it (copy_start, written_copy: +12); one sharing question,
# "anything but these escapes" (Report.besides), for the three checks of callers.py that each spelt it (-5); a
# docstring is ast.get_docstring's, not a helper of callers.py (-4); a statement alone in an `if`, `with`, loop or
# `try` is moved or rewritten with that control (moves.units, shared by GG101's fixes and write_in_graph, which keeps
# the control around the rewritten write: +25);
# session 24: one `return name` at a function's end (edits.return_at_end, also GG103's and GG108's), one grad-off
# `with` test (moves.no_grad_block, inference_mode too), one dotted-name test; wrappers' two "used around the write"
# walks one (-26); root_name and attribute_base walk one view chain (-2); the unified diff the file writer
# shows, and the line split it shares with diff_edits, are text.py's (-18);
# the sharing report's global/nonlocal statements and closure uses are asked of the one name index (names_in),
# not a second per-scope index (ScopeNames: -26); the planner leaves the edit toolkit for the autofix layer beside it
# (autofix/plan.py with the file writer, issue 26 item 5: -195);
# three fixes through a helper's callers (an attribute chain written in a helper, a closure's free variable rebound
# with `nonlocal`, a rule's own account of a call's other holders) paid for by shorter repairs in callers.py (0);
# session 25: context/identity/__init__ say each thing once, ``with_fix`` is Diagnostic's (-85); TextEdit
# application moves to text.py (-71); duplicate helpers and is_local go, three wrong copies refused (-65 net);
# ``Fixer`` leaves the edit toolkit for autofix/build.py (-165: moved, beside the planner that consumes it); wrapper
# fixes read the run's places of the written tensor's view chain instead of their own alias walk (-77); one grad-off
# test (state.turns_grad_off) and one dotted-name test (statements.is_dotted) for fixes, rules and inference (-17);
# two one-caller helpers go into their callers, from_run's parameters are its name index's (-15);
# the target: 2,600)
MODULE_LINES = 450  # the most lines a module of fixes/ has ...
OVER = {  # ... but these, each at most its size now, until split along its seams or emptied into facts
}


def _sources(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8") for p in sorted(folder.rglob("*.py"))}


def _lines(text: str) -> int:
    return len(text.splitlines())


def test_fixes_and_rules_walk_the_syntax_no_more_than_before() -> None:
    walks = {f"{folder.name}/{name}": text.count("ast.walk(")
             for folder in (FIXES, RULES) for name, text in _sources(folder).items()}
    total = sum(walks.values())
    assert total <= AST_WALKS, (
        f"{total} `ast.walk(` in fixes/ and rules/ (at most {AST_WALKS}): ask FixContext.names_in, the statements "
        f"index or the run's facts instead; by file: {sorted((n, k) for n, k in walks.items() if k)}")


def test_fixes_do_not_grow() -> None:
    total = sum(_lines(text) for text in _sources(FIXES).values())
    assert total <= FIXES_LINES, f"fixes/ has {total} lines (at most {FIXES_LINES})"


def test_no_module_of_fixes_is_over_its_size() -> None:
    sizes = {name: _lines(text) for name, text in _sources(FIXES).items()}
    over = {name: (n, OVER.get(name, MODULE_LINES)) for name, n in sizes.items() if n > OVER.get(name, MODULE_LINES)}
    assert over == {}, f"modules of fixes/ over their size (lines, at most): {over}"
    assert sorted(name for name in OVER if name not in sizes or sizes[name] <= MODULE_LINES) == [], \
        "a module listed in OVER is gone or back under the limit: drop it from OVER"


def test_facts_of_a_mutation_are_worked_out_once() -> None:
    """A question about a write that the rules and the explanation both ask is a property of ``Mutation``, not
    the same test written in each: "is every save the write breaks still unpacked" (``silent_before_packing``)
    reads ``before_packed``, which nothing else reads (the interpreter fills it)."""
    readers = sorted(path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
                     if ".before_packed" in path.read_text(encoding="utf-8"))
    assert readers == ["inference/events.py", "inference/interpreter.py"], readers


def test_the_second_analysis_is_gone() -> None:
    assert not (FIXES / "aliases.py").exists(), "fixes/aliases.py is back: ask the run's sharing facts instead"


def test_fixes_have_no_work_budget() -> None:
    """The budget (``FixContext.spend``) bounded the alias analysis; with the run's facts the work per finding is
    linear without it (``tests/test_work_per_finding.py``)."""
    text = (FIXES / "context.py").read_text(encoding="utf-8")
    assert "def spend" not in text and "FIX_STEPS_PER_CHARACTER" not in text


def test_the_closure_rebinding_is_one_helper() -> None:
    """A write rebound out of place through a closure's ``nonlocal`` name is built by ``callers.rebound_in_closure``
    alone: no rule checks the closure's calls itself."""
    builders = sorted(name for name, text in _sources(RULES).items()
                      if "closure_calls" in text or "_with_nonlocal" in text)
    assert builders == [], builders
