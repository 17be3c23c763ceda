"""The work of analysing a file and building its fixes grows with the file, not with its findings squared.

Fuzzed programs put hundreds of in-place writes to one name on one line.  Each write is a finding, and each
finding's fix used to redo work proportional to the whole statement or scope: parsing the statement with libcst,
walking the function, following every read of the name, rendering the statement again.  A 28-line program with
836 findings took 50 s to fix; one line of 10,000 writes took 45 s to analyse.

Work is counted in Python function calls (``cProfile``), which do not depend on the machine's load: doubling
and quadrupling the writes must leave the calls per finding about the same.  The programs are real: torch
raises at their backward (``test_the_programs_break_autograd``).
"""

from __future__ import annotations

import cProfile
import pstats

import pytest
from gradguard import parsing
from gradguard.api import _still_found, analyze_source
from gradguard.fixes.identity import FindingId
from gradguard.inference.saves import SAVES_KEPT_PER_STORAGE, SaveLog
from gradguard.inference.values import Save, Storage


def writes_in_a_list(k: int) -> str:
    """``k`` writes to the output `torch.sigmoid` saved, as the elements of one list."""
    return ("import torch\n\n\ndef train(w):\n    y = torch.sigmoid(w)\n    z = torch.stack(["
            + ", ".join(["y.mul_(1.0)"] * k) + "])\n    z.sum().backward()\n\n\ntrain(torch.randn(3, requires_grad=True))\n")


def saving_writes(k: int) -> str:
    """``k`` writes that each save what they wrote (`exp_` saves its result), to the output `torch.exp` saved."""
    return ("import torch\n\nw = torch.randn(3, requires_grad=True)\ny = torch.exp(w)\n"
            "v = torch.cat([" + ", ".join(["y.exp_()[1:]"] * k) + "])\nv.sum().backward()\n")


def calls_per_finding(text: str, fixes: bool) -> tuple[float, int, int]:
    """Function calls made by ``analyze_source`` per finding, the findings, and how many carry a fix."""
    profile = cProfile.Profile()
    profile.enable()
    result = analyze_source(text, "work.py", fixes=fixes)
    profile.disable()
    found = [d for d in result.diagnostics if d.code == "GG001"]
    return pstats.Stats(profile).total_calls / max(len(found), 1), len(found), sum(d.fix is not None for d in found)


@pytest.mark.parametrize("k", [3, 40])
@pytest.mark.parametrize("make", [writes_in_a_list, saving_writes])
def test_the_programs_break_autograd(make, k):
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        exec(compile(make(k), "work.py", "exec"), {"torch": torch})


def test_fixing_many_writes_on_one_line_is_linear():
    """Every write gets its fix (rebinding out of place), at the same cost per write for 100 and 400 writes.
    Before, each fix cost the whole statement again: 141,000 calls per finding at 100 writes, 540,000 at 400."""
    costs = {}
    for k in (100, 200, 400):
        per_finding, found, fixed = calls_per_finding(writes_in_a_list(k), fixes=True)
        assert found == fixed == k
        costs[k] = per_finding
    assert costs[400] < 1.3 * costs[100], costs


def test_analysing_many_writes_to_one_storage_is_linear():
    """A write asks for the saves of its own storage, at most ``SAVES_KEPT_PER_STORAGE`` of them.  Before, each
    write scanned every save the run had made: calls per finding grew fourfold from 500 to 2,000 writes."""
    costs = {}
    for k in (500, 1000, 2000):
        per_finding, found, _ = calls_per_finding(saving_writes(k), fixes=False)
        assert found == k
        costs[k] = per_finding
    assert costs[2000] < 1.5 * costs[500], costs


def _save(storage: Storage) -> Save:
    return Save(storage, storage.version, "torch.exp", "output", None, True)


def test_save_log_keeps_the_first_and_latest_saves_of_a_storage():
    log, busy, other = SaveLog(), Storage(), Storage()
    made = [_save(busy) for _ in range(3 * SAVES_KEPT_PER_STORAGE)]
    for save in made:
        log.add(save)
    log.add(lone := _save(other))
    half = SAVES_KEPT_PER_STORAGE // 2
    assert list(log.on([busy.id])) == made[:half] + made[-half:]
    assert list(log.on([other.id])) == [lone]


def test_save_log_takes_out_and_puts_back_a_branch_s_saves_in_order():
    """An ``if`` body's saves are taken out while its ``else`` runs, then put back before the ``else``'s."""
    log, storage = SaveLog(), Storage()
    before = _save(storage)
    log.add(before)
    mark = log.last_id
    body = [_save(storage), _save(storage)]
    for save in body:
        log.add(save)
    assert log.take_after(mark) == body
    assert list(log.on([storage.id])) == [before]
    orelse = _save(storage)
    log.add(orelse)
    log.put_back(body)
    assert list(log.on([storage.id])) == [before, *body, orelse]


def analyses_made(run) -> tuple[object, int]:
    """``run()``'s result, and how many analyses of a module it made."""
    profile = cProfile.Profile()
    result = profile.runcall(run)
    calls = sum(stat[1] for (_, _, name), stat in pstats.Stats(profile).stats.items() if name == "analyze_module")
    return result, calls


def test_a_candidate_text_is_analysed_once_for_the_findings_of_the_same_functions():
    """A fix checks its candidate text for its finding (``FixContext.still_found``); the findings of other rules at
    the same write, and the earlier writes ``Fixer._leaves`` asks about, are checked against the same text and
    functions: one analysis answers them all, as each would have been answered alone.  Another text, or another
    function, is analysed again."""
    text = writes_in_a_list(2)
    fixed = text.replace("y = torch.sigmoid(w)", "y = torch.sigmoid(w).clone()")
    # (the writes are found by the analysis of the module's code, which calls `train` at line 10)
    asked = [FindingId(code, 6, caller_line=10) for code in ("GG001", "GG002", "GG104")]
    parsed = parsing.parse_document(text)
    alone = [_still_found(parsed, "work.py")(text, finding) for finding in asked]
    assert alone == [True, False, False]  # (the writes are GG001's; the others are not found there)
    check = _still_found(parsed, "work.py")
    answers, calls = analyses_made(lambda: [check(text, finding) for finding in asked])
    assert (answers, calls) == (alone, 1)
    answers, calls = analyses_made(lambda: [check(fixed, finding) for finding in asked])
    assert calls == 1 and answers == [_still_found(parsed, "work.py")(fixed, finding) for finding in asked]
    answers, calls = analyses_made(lambda: [check(fixed, FindingId("GG001", 6)), check(text, asked[0])])
    assert (answers, calls) == ([False, True], 2)
