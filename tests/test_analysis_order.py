"""An analysis does not depend on what the process analysed before it (the language server and ``gradguard
check`` analyse many files in one process): value ids come from one counter, so any choice made in the order of a
set of ids would change with the files before."""

from __future__ import annotations

import ast
from pathlib import Path

from gradguard import api
from gradguard.inference import values
from gradguard.inference.interpreter import SAVES_KEPT_PER_OP, _few_of_each
from gradguard.inference.values import Save, Storage

CASE = Path(__file__).parent.parent / "bench/realworld/cases/129_oac_trainer_policy_loss_before_qf_steps.py"


def test_a_write_keeps_the_first_and_last_saves_made_whatever_order_its_storages_come_in():
    node = ast.parse("layer(x)").body[0]
    first, second = Storage(), Storage()
    made = [Save(storage, 0, "nn.Linear", "weight", node, True) for _ in range(4) for storage in (first, second)]
    by_first = [s for s in made if s.storage is first] + [s for s in made if s.storage is second]
    by_second = [s for s in made if s.storage is second] + [s for s in made if s.storage is first]
    kept = [*made[:2], *made[-(SAVES_KEPT_PER_OP - 2):]]
    assert _few_of_each(by_first) == kept
    assert _few_of_each(by_second) == kept


def test_a_real_case_reads_the_same_after_other_analyses():
    text = CASE.read_text(encoding="utf-8")
    seen = set()
    for skipped in (0, 1, 2, 3, 5, 8, 13):
        for _ in range(skipped):  # as if other files had been analysed first
            next(values._ids)
        result = api.analyze_source(text, str(CASE))
        seen.add(tuple((d.code, d.line, d.message) for d in result.diagnostics))
    assert len(seen) == 1, [[m for _, _, m in s] for s in seen]
