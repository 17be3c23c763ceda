"""Fix-all's edits (gradguard.lsp.fixes: the planner's result as edits), and following edits."""

from __future__ import annotations

from gradguard.diagnostics import Diagnostic, Fix, Related, Severity, Span, TextEdit
from gradguard.autofix.writer import fix_text
from gradguard.text import apply_edits
from gradguard.lsp.fixes import edits_between, fix_all
from gradguard.lsp.follow import follow_edit


def edit(line, column, end_line, end_column, new_text=""):
    return {"line": line, "column": column, "end_line": end_line, "end_column": end_column, "new_text": new_text}


def test_fix_all_edits_are_the_planners_fixed_text():
    """The language server's fix-all is the planner's result as edits (the planner is tested in tests/fixes)."""
    from fixture_corpus import all_fixtures
    from gradguard.api import analyze_source

    text = next(fx.path.read_text(encoding="utf-8") for fx in all_fixtures() if fx.id == "GG001/pos_abs_input_l1_rescale")
    done = fix_all(text, lambda t: analyze_source(t, "t.py"))
    assert done.changed and done.applied
    assert apply_edits(text, edits_between(done.original, done.text)) == done.text
    assert fix_text(text, "t.py").fixed == done.text


def test_apply_edits_counts_code_points_and_keeps_line_breaks():
    text = "s = '😀'; x += 1\r\nψ += 2\n"
    edits = [edit(1, 10, 1, 16, "x = x + 1"), edit(2, 1, 2, 7, "ψ = ψ + 2")]
    assert apply_edits(text, edits) == "s = '😀'; x = x + 1\r\nψ = ψ + 2\n"


def _diag(line, fix_line=None, related_line=None):
    return Diagnostic(
        path="p.py",
        span=Span(line, 1, line, 7),
        code="GG002",
        severity=Severity.ERROR,
        message="m",
        related=(Related("p.py", related_line, 1, "r"),) if related_line else (),
        fix=Fix("f", True, (TextEdit(fix_line, 1, fix_line, 7, "x = x + 1"),)) if fix_line else None,
    )


def test_follow_edit_shifts_findings_below_an_insertion():
    old = "a\nb\nc\nd\n"
    new = "a\nNEW\nNEW2\nb\nc\nd\n"
    moved = follow_edit([_diag(1), _diag(3, fix_line=3, related_line=2)], old, new)
    assert [d.line for d in moved] == [1, 5]
    assert moved[1].related[0].line == 4 and moved[1].fix.edits[0].line == 5


def test_follow_edit_drops_findings_on_edited_lines_and_shifts_after_deletion():
    old = "a\nb\nc\nd\ne\n"
    new = "a\nB\ne\n"  # b..d replaced by one line
    moved = follow_edit([_diag(1), _diag(3), _diag(5, fix_line=5)], old, new)
    assert [(d.line, d.fix.edits[0].line if d.fix else None) for d in moved] == [(1, None), (3, 3)]


def test_follow_edit_drops_a_fix_that_reaches_into_the_edit():
    old = "a\nb\nc\n"
    new = "a\nB\nc\n"
    d = _diag(1, fix_line=2)
    (moved,) = follow_edit([d], old, new)
    assert moved.line == 1 and moved.fix is None


def _change(l1, c1, l2, c2, text):
    from lsprotocol import types

    return types.TextDocumentContentChangePartial(
        range=types.Range(start=types.Position(line=l1, character=c1), end=types.Position(line=l2, character=c2)), text=text
    )


def test_follow_changes_applies_ranged_changes_in_order():
    from gradguard.lsp.follow import follow_changes

    diags = [_diag(2), _diag(5), _diag(9)]
    changes = [
        _change(0, 0, 0, 0, "# one\n# two\n"),  # whole lines inserted above everything: +2, nothing edited
        _change(6, 4, 6, 4, "x"),  # a keystroke on line 7 (was line 5): that finding goes
        _change(8, 0, 10, 0, ""),  # lines 9-10 deleted: 11 (was 9) moves up to 9
    ]
    moved = follow_changes(diags, "", "", changes)
    assert [d.line for d in moved] == [4, 9]


def test_follow_changes_whole_document_falls_back_to_diff():
    from lsprotocol import types

    from gradguard.lsp.follow import follow_changes

    old, new = "a\nb\nc\n", "z\na\nb\nc\n"
    moved = follow_changes([_diag(3)], old, new, [types.TextDocumentContentChangeWholeDocument(text=new)])
    assert [d.line for d in moved] == [4]
