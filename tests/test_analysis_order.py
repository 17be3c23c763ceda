"""An analysis does not depend on what the process analysed before it (the language server and ``gradguard
check`` analyse many files in one process): value ids come from one counter, so any choice made in the order of a
set of ids would change with the files before."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from gradguard import api
from gradguard.inference import values
from gradguard.inference.interpreter import SAVES_KEPT_PER_OP, _few_of_each
from gradguard.inference.values import Save, Storage

CASES = Path(__file__).parent.parent / "bench/realworld/cases"


def test_a_write_keeps_the_first_and_last_saves_of_each_memory_whatever_order_its_storages_come_in():
    node = ast.parse("layer(x)").body[0]
    first, second = Storage(), Storage()
    made = [Save(storage, 0, "nn.Linear", "weight", node, True) for _ in range(6) for storage in (first, second)]
    by_first = [s for s in made if s.storage is first] + [s for s in made if s.storage is second]
    by_second = [s for s in made if s.storage is second] + [s for s in made if s.storage is first]
    of_first, of_second = by_first[:6], by_first[6:]
    last = SAVES_KEPT_PER_OP - 2
    kept = sorted([*of_first[:2], *of_first[-last:], *of_second[:2], *of_second[-last:]], key=lambda s: s.id)
    assert _few_of_each(by_first) == kept
    assert _few_of_each(by_second) == kept


@pytest.mark.parametrize("case, lines", [("129_oac_trainer_policy_loss_before_qf_steps", {95, 99}),
                                         ("111_cyclegan_fake_not_detached_for_d", {81, 90})])
def test_a_real_case_reads_the_same_after_other_analyses(case, lines):
    """Both of 111's culprit lines are found (a step over two generators breaks the graphs of both fakes), and 129's
    messages do not change."""
    path = CASES / f"{case}.py"
    text = path.read_text(encoding="utf-8")
    seen = set()
    for skipped in (0, 1, 2, 3, 5, 8, 13):
        for _ in range(skipped):  # as if other files had been analysed first
            next(values._ids)
        result = api.analyze_source(text, str(path))
        seen.add(tuple((d.code, d.line, d.message) for d in result.diagnostics))
    assert len(seen) == 1, [[m for _, _, m in s] for s in seen]
    assert {line for code, line, _ in seen.pop() if code == "GG101"} == lines
