"""The fix planner on plain data: which fixes a pass takes, and how passes go on to a fixpoint or stop.

The analysis is a callback (here a tiny fake one over the text), so the planner is tested without the engine;
tests/test_fix_paths.py checks that the CLI, notebooks and the language server all get their edits from it.
"""

from __future__ import annotations

import re

import pytest
from gradguard.diagnostics import Fix, TextEdit
from gradguard.autofix import plan


def fix(line, new, title="fix", safe=True, old_len=5):
    return Fix(title, safe, (TextEdit(line, 1, line, 1 + old_len, new),))


def test_choose_takes_fixes_in_document_order_whatever_order_they_come_in():
    a, b = fix(2, "b = 2"), fix(4, "d = 4")
    assert plan.choose([b, a], unsafe=False) == [a, b]
    assert plan.choose([a, b, fix(2, "b = 2")], unsafe=False) == [a, b]  # the same fix from two findings: once


def test_choose_leaves_unsafe_fixes_out_unless_asked():
    a, b = fix(1, "a = 1"), fix(3, "c = 3", safe=False)
    assert plan.choose([a, b], unsafe=False) == [a]
    assert plan.choose([a, b], unsafe=True) == [a, b]


def test_conflicting_fixes_keep_one_the_same_one_in_any_order():
    first, second = fix(2, "b = 2", title="A: rewrite"), fix(2, "b += 2", title="B: rewrite")
    assert plan.choose([second, first], unsafe=False) == [first]
    assert plan.choose([first, second], unsafe=False) == [first]
    # same title, same start: the edits decide, never the order of the findings
    x, y = fix(2, "x = 2"), fix(2, "y = 2")
    assert plan.choose([x, y], unsafe=False) == plan.choose([y, x], unsafe=False)


def test_one_fix_per_group_per_pass():
    a, b, c = fix(2, "b = 2"), fix(3, "c = 3"), fix(5, "e = 5")
    assert plan.choose([a, b, c], unsafe=False, groups=["f", "f", "g"]) == [a, c]


TEXT = "a = 0\na = 0\n\ndef f():\n    a = 0\n    a = 0\n"


def analyse(text: str) -> plan.Analysis:
    """Every `a = 0` is a finding; its fix makes it `b = 0`.  A line `bad` is a finding with no fix."""
    candidates = []
    findings = 0
    for n, line in enumerate(text.splitlines(), start=1):
        m = re.match(r"(\s*)a = 0$", line)
        findings += bool(m) + ("bad" in line)
        if m:
            col = len(m[1]) + 1
            candidates.append(plan.Candidate(Fix("a to b", True, (TextEdit(n, col, n, col + 5, "b = 0"),)), n))
    return plan.Analysis(tuple(candidates), findings)


def test_passes_go_on_until_no_fix_is_left_one_per_function_each():
    done = plan.run(TEXT, analyse)
    assert done.text == TEXT.replace("a = 0", "b = 0")
    assert len(done.applied) == 4 and not done.problems
    assert done.analysis.findings == 0 and done.first.findings == 4
    # module level and f() each get one fix per pass: two passes of two
    passes = []
    plan.run(TEXT, lambda t: passes.append(t) or analyse(t))
    assert len(passes) == 3


def test_a_pass_whose_code_would_not_parse_leaves_the_text_as_it_was():
    broken = lambda t: plan.Analysis((plan.Candidate(Fix("break it", True, (TextEdit(1, 1, 1, 2, "("),)), 1),), 1)
    done = plan.run(TEXT, broken)
    assert done.text == TEXT and not done.applied
    assert done.problems == ["the fixed code would not parse (break it); file left unchanged"]


def test_a_fix_that_does_not_remove_its_finding_stops_the_passes():
    stuck = lambda t: plan.Analysis((plan.Candidate(Fix("rename", True, (TextEdit(1, 1, 1, 2, "c"),)), 1),), 1)
    done = plan.run(TEXT, stuck)
    assert done.text == TEXT
    assert done.problems == ["a fix did not remove its finding (rename); not applied"]


def test_an_apply_callback_can_refuse_a_pass():
    def refuse(text, fixes):
        raise plan.PassRefused("the fixed cell 2 would not parse (a to b)")

    done = plan.run(TEXT, analyse, apply=refuse, unit="notebook")
    assert done.text == TEXT and done.problems == ["the fixed cell 2 would not parse (a to b); notebook left unchanged"]


@pytest.mark.parametrize("unsafe", [False, True])
def test_unsafe_fixes_only_with_unsafe(unsafe):
    offer = lambda t: plan.Analysis(
        (plan.Candidate(Fix("u", False, (TextEdit(1, 1, 1, 6, "b = 0"),)), 1),) if t.startswith("a") else (),
        1 if t.startswith("a") else 0)
    done = plan.run(TEXT, offer, unsafe=unsafe)
    assert done.changed is unsafe
