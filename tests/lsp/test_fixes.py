"""Unit tests of fix-all's edit merging (gradguard.lsp.fixes) on plain data, and of following edits."""

from __future__ import annotations

from gradguard.diagnostics import Diagnostic, Fix, Related, Severity, Span, TextEdit
from gradguard.lsp.fixes import apply_edits, merge_fixes, parse_edits
from gradguard.lsp.server import follow_edit


def edit(line, column, end_line, end_column, new_text=""):
    return {"line": line, "column": column, "end_line": end_line, "end_column": end_column, "new_text": new_text}


def fix(*edits, safe=True, title="fix"):
    return {"title": title, "safe": safe, "edits": list(edits)}


TEXT = "a = x\nx += 1\ny = x * 2\nx.add_(1)\n"


def test_disjoint_safe_fixes_are_all_applied_in_document_order():
    second = fix(edit(4, 1, 4, 10, "x = x.add(1)"))
    first = fix(edit(2, 1, 2, 7, "x = x + 1"))
    result = merge_fixes([second, first])
    assert result.applied == [first, second]
    assert [e["line"] for e in result.edits] == [2, 4]
    assert apply_edits(TEXT, result.edits) == "a = x\nx = x + 1\ny = x * 2\nx = x.add(1)\n"


def test_unsafe_and_missing_fixes_are_left_out_silently():
    result = merge_fixes([fix(edit(2, 1, 2, 7, "x = x + 1"), safe=False), None, {"title": "t"}, fix(edit(1, 1, 1, 1, "#"), safe="yes")])
    assert result.edits == [] and result.applied == []
    assert result.skipped == []  # unsafe (or not marked safe) fixes are not candidates at all


def test_overlapping_fix_is_skipped_whole():
    a = fix(edit(2, 1, 2, 7, "x = x + 1"))
    b = fix(edit(2, 3, 2, 5, "-="), edit(4, 1, 4, 10, "x = x.add(1)"))  # overlaps a on line 2
    result = merge_fixes([a, b])
    assert result.applied == [a]
    assert result.skipped == [(b, "overlaps another fix")]
    assert apply_edits(TEXT, result.edits) == "a = x\nx = x + 1\ny = x * 2\nx.add_(1)\n"  # line 4 untouched


def test_touching_edits_do_not_overlap_but_same_start_does():
    a = fix(edit(2, 1, 2, 3, "z"))
    touching = fix(edit(2, 3, 2, 5, "-="))
    assert merge_fixes([touching, a]).applied == [a, touching]
    assert apply_edits(TEXT, merge_fixes([a, touching]).edits).split("\n")[1] == "z-= 1"
    same_start = fix(edit(2, 3, 2, 3, "# "))  # an insertion where `touching` starts: order undefined
    result = merge_fixes([a, touching, same_start])
    assert result.applied == [a, same_start]  # document order: the insertion sorts before the replacement
    assert result.skipped == [(touching, "overlaps another fix")]


def test_same_fix_from_two_diagnostics_is_applied_once():
    a = fix(edit(2, 1, 2, 7, "x = x + 1"))
    result = merge_fixes([a, dict(a)])
    assert len(result.applied) == 1 and len(result.edits) == 1


def test_multi_edit_fix_with_edits_in_any_order():
    a = fix(edit(4, 1, 4, 10, "x = x.add(1)"), edit(1, 1, 1, 1, "import torch\n"))
    result = merge_fixes([a])
    assert [e["line"] for e in result.edits] == [1, 4]
    assert apply_edits(TEXT, result.edits) == "import torch\na = x\nx += 1\ny = x * 2\nx = x.add(1)\n"


def test_malformed_fixes_are_skipped_never_guessed():
    bad = [
        fix(edit(0, 1, 1, 1, "x")),  # line 0
        fix(edit(2, 5, 2, 1, "x")),  # end before start
        fix(edit(1, 1, 1, 3, "x"), edit(1, 2, 1, 4, "y")),  # its own edits overlap
        fix({"line": 1, "column": 1, "end_line": 1, "end_column": 2}),  # no new_text
        fix(edit(1, True, 1, 2, "x")),  # a bool is not a column
        {"title": "t", "safe": True, "edits": []},
    ]
    result = merge_fixes(bad)
    assert result.edits == [] and result.applied == []
    assert len(result.skipped) == len(bad)
    assert parse_edits(fix(edit(1, 1, 1, 3, "x"))) is not None


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
    from gradguard.lsp.server import follow_changes

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

    from gradguard.lsp.server import follow_changes

    old, new = "a\nb\nc\n", "z\na\nb\nc\n"
    moved = follow_changes([_diag(3)], old, new, [types.TextDocumentContentChangeWholeDocument(text=new)])
    assert [d.line for d in moved] == [4]
