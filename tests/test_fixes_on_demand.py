"""``analyze_source(..., fixes=False)`` (the language server's diagnostics) builds no fix, and its
``FileResult.fixes`` builds, when asked, exactly the fixes ``fixes=True`` gives: for every fixture, as opened and
after lines were inserted above its code with the per-document cache warm (its findings were then moved before
their fixes were built, and are found again to build them)."""

from __future__ import annotations

import pytest
from fixture_corpus import Fixture, all_fixtures
from gradguard import api
from gradguard import notebooks as nb
from gradguard.api import analyze_source
from gradguard.config import Config

FIXTURES = all_fixtures()


def _lazily_fixed(text: str, path: str, cache: dict | None = None) -> list:
    result = analyze_source(text, path, Config(), cache=cache, fixes=False)
    assert all(d.fix is None for d in result.diagnostics)
    return result.fixes.fixed(result.diagnostics) if result.fixes is not None else result.diagnostics


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.id)
def test_fixes_on_demand_are_the_fixes(fx: Fixture):
    text, path = fx.path.read_text(encoding="utf-8"), str(fx.path)
    assert _lazily_fixed(text, path) == analyze_source(text, path, Config()).diagnostics
    cache: dict = {}
    analyze_source(text, path, Config(), cache=cache, fixes=False)
    moved = "\n\n# two lines above\n" + text
    assert _lazily_fixed(moved, path, cache) == analyze_source(moved, path, Config()).diagnostics


def test_the_moved_findings_are_found_again():
    """The second case above does go through findings moved before their fix was built."""
    fx = next(f for f in FIXTURES if f.positive and f.path.parent.name == "GG001")
    text, cache = fx.path.read_text(encoding="utf-8"), {}
    analyze_source(text, str(fx.path), Config(), cache=cache, fixes=False)
    result = analyze_source("\n" + text, str(fx.path), Config(), cache=cache, fixes=False)
    assert any(f.data_stale for f in result.fixes.findings.values())
    fixed = result.fixes.fixed(result.diagnostics)
    assert any(d.fix is not None for d in fixed) and not any(f.fix_memo is None for f in result.fixes.findings.values()
                                                             if f.code == "GG001")


def test_no_fix_is_built_for_the_diagnostics(monkeypatch: pytest.MonkeyPatch):
    calls = []
    for code, build in list(api.FIX_BUILDERS.items()):
        monkeypatch.setitem(api.FIX_BUILDERS, code, lambda ctx, f, build=build: calls.append(f.code) or build(ctx, f))
    fx = next(f for f in FIXTURES if f.positive and f.path.parent.name == "GG001")
    result = analyze_source(fx.path.read_text(encoding="utf-8"), str(fx.path), Config(), fixes=False)
    assert result.diagnostics and not calls
    result.fixes.fixed(result.diagnostics[:1])
    assert calls[:1] == [result.diagnostics[0].code]


@pytest.mark.parametrize("fx", [f for f in FIXTURES if f.positive], ids=lambda fx: fx.id)
def test_notebook_fixes_on_demand_are_the_fixes(fx: Fixture):
    """The same for a notebook (a markdown cell, then the fixture split in two code cells): fixes in cell positions."""
    lines = fx.path.read_text(encoding="utf-8").split("\n")
    half = len(lines) // 2
    while half > 0 and lines[half][:1] in (" ", "\t", ")", "]", "}"):
        half -= 1  # start the second cell at a line of the top level
    cells = [("markdown", "# notes"), ("code", "\n".join(lines[:half])), ("code", "\n".join(lines[half:]))]
    program = nb.Program.from_cells(cells)
    lazy = api.analyze_program(program, "x.ipynb", Config(), fixes=False)[0]
    assert all(d.fix is None for d in lazy.diagnostics)
    fixed = lazy.fixes.fixed(lazy.diagnostics) if lazy.fixes is not None else lazy.diagnostics
    assert fixed == api.analyze_program(program, "x.ipynb", Config())[0].diagnostics
