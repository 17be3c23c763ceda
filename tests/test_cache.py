"""The per-document cache: an edit re-analyses only the functions it can affect, and never changes results."""

from __future__ import annotations

import textwrap

import pytest

from gradguard import engine
from gradguard.api import analyze_source

SOURCE = textwrap.dedent('''
    import torch
    import torch.nn as nn


    def scale_(t):
        t.mul_(2)


    def first():
        x = torch.zeros(3, requires_grad=True)
        x += 1


    def second():
        w = torch.randn(3, requires_grad=True)
        y = torch.sigmoid(w)
        y += 1
        y.sum().backward()


    def third():
        w = torch.randn(3, requires_grad=True)
        y = torch.exp(w)
        scale_(y)
        y.sum().backward()
''')


def _findings(result):
    return [(d.line, d.code, d.message) for d in result.diagnostics]


@pytest.fixture
def runs(monkeypatch):
    """Counts the functions the engine really analyses (cache misses)."""
    analysed = []
    real = engine._run_unit

    def counting(ctx, fn, owner, tree):
        analysed.append(fn.name if fn is not None else "<module>")
        return real(ctx, fn, owner, tree)

    monkeypatch.setattr(engine, "_run_unit", counting)
    return analysed


def test_an_edit_inside_one_function_reanalyses_only_it(runs):
    cache: dict = {}
    analyze_source(SOURCE, "f.py", cache=cache)
    assert set(runs) >= {"first", "second", "third"}
    runs.clear()
    edited = SOURCE.replace("x += 1", "x += 2")
    result = analyze_source(edited, "f.py", cache=cache)
    assert runs == ["first"]
    assert _findings(result) == _findings(analyze_source(edited, "f.py"))


def test_editing_a_helper_reanalyses_its_callers(runs):
    cache: dict = {}
    before = analyze_source(SOURCE, "f.py", cache=cache)
    assert (25, "GG001") in {(line, code) for line, code, _ in _findings(before)}  # the call scale_(y)
    runs.clear()
    edited = SOURCE.replace("t.mul_(2)", "t = t * 2")
    result = analyze_source(edited, "f.py", cache=cache)
    assert set(runs) == {"scale_", "third"}
    assert _findings(result) == _findings(analyze_source(edited, "f.py"))
    assert not any(code == "GG001" and line == 25 for line, code, _ in _findings(result))


def test_shifted_lines_are_not_served_from_the_cache(runs):
    cache: dict = {}
    analyze_source(SOURCE, "f.py", cache=cache)
    edited = SOURCE.replace("def first():", "# a comment\ndef first():")
    result = analyze_source(edited, "f.py", cache=cache)
    assert _findings(result) == _findings(analyze_source(edited, "f.py"))
