"""The analyzer flags exactly the lines the fixtures mark, and nothing in negatives or reference()."""

from __future__ import annotations

import pytest

from fixture_corpus import Fixture, all_fixtures
from gradguard.api import analyze_path

FIXTURES = all_fixtures()

# Positives torch proves but the analyzer does not find yet.  Strict: when one starts passing, it must leave
# this list, so the list stays honest (the issue notes quote it).
KNOWN_MISSES = {
}


def _marks(fx: Fixture):
    reason = KNOWN_MISSES.get(fx.id)
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []


@pytest.mark.parametrize("fx", [pytest.param(f, id=f.id, marks=_marks(f)) for f in FIXTURES])
def test_analyzer_flags_exactly_the_marked_lines(fx: Fixture):
    result = analyze_path(fx.path)
    assert result.error is None, result.error
    found = {(d.line, d.code) for d in result.diagnostics}
    assert found == set(fx.expected), "\n".join(f"{d.line}: {d.code} {d.message}" for d in result.diagnostics)


def test_recall_and_precision_summary(capsys):
    """Prints the corpus-wide figures the issue notes quote (the parametrized test above is the gate)."""
    tp = fp = fn = 0
    for fx in FIXTURES:
        found = {(d.line, d.code) for d in analyze_path(fx.path).diagnostics}
        tp += len(found & fx.expected)
        fp += len(found - fx.expected)
        fn += len(fx.expected - found)
    with capsys.disabled():
        print(f"\nfixture findings: {tp} expected found, {fp} unexpected, {fn} missed")
    assert tp + fn > 0
