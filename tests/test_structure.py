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

AST_WALKS = 21  # ``ast.walk(`` in fixes/ and rules/: a fix asks the statements index and the run's facts
# instead of walking the syntax itself (116 in session 18; the target is 30). History: git log.
FIXES_LINES = 2_600  # lines of fixes/, the edit toolkit: fixes read the dataflow's facts rather than
# re-deriving them (3,950 in session 18; issue 26's line is 2,600). History: git log -- server/gradguard/fixes.
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
