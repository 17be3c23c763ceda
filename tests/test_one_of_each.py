"""One of each: one ``apply_edits`` with one rule for overlaps, one byte-to-code-point conversion (``text.py``),
one diagnostic order (``Diagnostic.order``), one finding identity (``Finding.place``, ``Diagnostic.place``)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

SERVER = Path(__file__).resolve().parents[1] / "server"
if str(SERVER) not in sys.path:
    sys.path.insert(0, str(SERVER))

from gradguard.diagnostics import Diagnostic, Severity, Span, TextEdit  # noqa: E402
from gradguard.text import apply_edits  # noqa: E402
from gradguard.text import code_point_column  # noqa: E402

PACKAGE = SERVER / "gradguard"


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, path.read_text(encoding="utf-8")


def test_apply_edits_takes_both_shapes_and_one_overlap_rule():
    text = "s = 'ψ'; x += 1\r\ny = 2\n"
    edit = TextEdit(1, 10, 1, 16, "x = x + 1")
    as_json = {"line": 1, "column": 10, "end_line": 1, "end_column": 16, "new_text": "x = x + 1"}
    assert apply_edits(text, [edit]) == apply_edits(text, [as_json]) == "s = 'ψ'; x = x + 1\r\ny = 2\n"
    # touching edits are fine; insertions at one place keep the order given (as an editor applies them)
    assert apply_edits("ab", [TextEdit(1, 2, 1, 2, "2"), TextEdit(1, 2, 1, 2, "1"), TextEdit(1, 1, 1, 2, "A")]) == "A21b"
    with pytest.raises(ValueError):
        apply_edits("abcd", [TextEdit(1, 1, 1, 3, "x"), TextEdit(1, 2, 1, 4, "y")])
    assert apply_edits("ab\n", [TextEdit(9, 9, 9, 9, "!")]) == "ab\n!"  # positions past the end are clamped


def test_code_point_column():
    assert code_point_column("x = 1", 4) == 4
    line = "s = 'ψ😀' + x"
    assert code_point_column(line, len(line[:9].encode("utf-8"))) == 9
    assert code_point_column(line, len("s = '".encode("utf-8")) + 1) == 5  # inside ψ: the characters before it


def test_one_definition_each():
    defined = [(path.name, node.name) for path, source in _sources() for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.FunctionDef) and node.name in ("apply_edits", "sort_key", "_place", "key_of")]
    assert [d for d in defined if d[1] == "apply_edits"] == [("text.py", "apply_edits")]
    assert not [d for d in defined if d[1] in ("sort_key", "_place")]
    decoders = [path.name for path, source in _sources() if 'errors="ignore")' in source and "utf-8" in source]
    assert decoders == ["text.py"], decoders
    # a diagnostic's order and a finding's place are spelt once
    spelt = re.compile(r"span\.line, \w+\.span\.column, \w+\.code|"
                       r"getattr\(\w+\.node, \"lineno\", 0\), getattr\(\w+\.node, \"col_offset\", 0\)")
    places = [path.name for path, source in _sources() if spelt.search(source)]
    assert places == ["diagnostics.py", "events.py"], places  # where Diagnostic.order and Finding.place are


def test_order_and_place():
    def diag(path, line, column, code, cell=None):
        return Diagnostic(path, Span(line, column, line, column + 1), code, Severity.ERROR, "m", cell=cell)

    ds = [diag("b.py", 1, 1, "GG001"), diag("a.py", 2, 1, "GG002"), diag("a.py", 2, 1, "GG001"),
          diag("a.ipynb", 1, 1, "GG001", cell=2), diag("a.ipynb", 5, 1, "GG001", cell=1)]
    assert [(d.path, d.cell, d.code) for d in sorted(ds, key=lambda d: d.order)] == [
        ("a.ipynb", 1, "GG001"), ("a.ipynb", 2, "GG001"), ("a.py", None, "GG001"), ("a.py", None, "GG002"),
        ("b.py", None, "GG001")]
    assert ds[1].place == ("GG002", 2, 1)
