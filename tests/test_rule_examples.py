"""Every rule's documented examples are true: torch raises on INVALID ones, runs VALID ones, and the analyzer agrees."""

from __future__ import annotations

import pytest

from gradguard.api import analyze_source
from gradguard.rules import ALL_RULES

torch = pytest.importorskip("torch")

INVALID = [(r.code, i, ex) for r in ALL_RULES for i, ex in enumerate(r.invalid)]
VALID = [(r.code, i, ex) for r in ALL_RULES for i, ex in enumerate(r.valid)]


def _run(code: str) -> None:
    exec(compile(code, "<example>", "exec"), {"__name__": "__example__"})


@pytest.mark.parametrize("code,index,example", INVALID, ids=lambda v: str(v) if not hasattr(v, "code") else "")
def test_invalid_example_breaks_autograd_and_is_flagged(code, index, example):
    if example.raises is None:  # silent: the fixtures under tests/fixtures/<code>/ prove the wrong gradients
        _run(example.code)
    else:
        with pytest.raises(RuntimeError) as info:
            _run(example.code)
        assert str(info.value).splitlines()[0].startswith(example.raises)
    flagged_lines = {d.line for d in analyze_source(example.code).diagnostics if d.code == code}
    marked = {n for n, line in enumerate(example.code.splitlines(), start=1) if f"# {code}" in line}
    assert marked and flagged_lines == marked


@pytest.mark.parametrize("code,index,example", VALID, ids=lambda v: str(v) if not hasattr(v, "code") else "")
def test_valid_example_runs_clean_and_is_not_flagged(code, index, example):
    _run(example.code)
    assert analyze_source(example.code).diagnostics == []


def test_every_rule_has_examples_and_docs():
    for rule in ALL_RULES:
        assert rule.invalid and rule.valid, rule.code
        assert rule.when_wrong.strip(), f"{rule.code}: say when the rule can be wrong"
        docs = rule.docs()
        assert rule.code in docs and "How to fix it" in docs
