"""Fuzz ``analyze_source`` with damaged fixtures: it must never raise, whatever it is fed.

Inputs are derived from the fixture corpus: truncations, splices of two fixtures,
random byte mutations and line deletions/duplications.  The number of examples per
test comes from ``GRADGUARD_FUZZ_EXAMPLES`` (default 150).
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradguard.api import analyze_source
from gradguard.diagnostics import SYNTAX_ERROR, UNREADABLE, FileResult

FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*/*.py"))
TEXTS = [p.read_text(encoding="utf-8") for p in FIXTURES]
EXAMPLES = int(os.environ.get("GRADGUARD_FUZZ_EXAMPLES", "150"))

fuzz_settings = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

fixture_text = st.sampled_from(TEXTS)


def _line_count(source: str | bytes) -> int:
    # An upper bound on the lines the parser sees: str.splitlines also splits on \x0c, \x1c, ...
    return len(source.splitlines())


def check(source: str | bytes) -> FileResult:
    result = analyze_source(source, "fuzz.py")
    assert isinstance(result, FileResult)
    if result.error is None:
        limit = _line_count(source) + 1
        for diag in result.diagnostics:
            assert 1 <= diag.line <= limit, (diag, limit)
            assert diag.span.column >= 1, diag
            assert diag.code.startswith("GG"), diag
            assert isinstance(diag.message, str) and diag.message, diag
    else:
        assert len(result.diagnostics) == 1, result
        assert result.diagnostics[0].code in {SYNTAX_ERROR, UNREADABLE}, result
    return result


def test_corpus_is_present():
    assert len(TEXTS) > 10


@fuzz_settings
@given(text=fixture_text, data=st.data())
def test_truncations(text, data):
    cut = data.draw(st.integers(0, len(text)), label="cut")
    check(text[:cut])
    raw = text.encode("utf-8")
    byte_cut = data.draw(st.integers(0, len(raw)), label="byte_cut")
    check(raw[:byte_cut])  # may split a multi-byte character


@fuzz_settings
@given(target=fixture_text, donor=fixture_text, data=st.data())
def test_splices(target, donor, data):
    start = data.draw(st.integers(0, len(donor)), label="start")
    end = data.draw(st.integers(start, len(donor)), label="end")
    offset = data.draw(st.integers(0, len(target)), label="offset")
    spliced = target[:offset] + donor[start:end] + target[offset:]
    check(spliced)
    check(spliced.encode("utf-8"))


_byte_edit = st.tuples(
    st.sampled_from(["flip", "insert", "delete"]),
    st.floats(0, 1, exclude_max=True),
    st.integers(0, 255),
)


@fuzz_settings
@given(text=fixture_text, edits=st.lists(_byte_edit, min_size=1, max_size=8))
def test_byte_mutations(text, edits):
    buf = bytearray(text.encode("utf-8"))
    for kind, where, value in edits:
        pos = int(where * (len(buf) + 1))
        if kind == "insert":
            buf.insert(pos, value)
        elif pos < len(buf):
            if kind == "flip":
                buf[pos] ^= value or 0x80
            else:
                del buf[pos]
    check(bytes(buf))


_line_edit = st.tuples(st.sampled_from(["delete", "duplicate"]), st.floats(0, 1, exclude_max=True))


@fuzz_settings
@given(text=fixture_text, edits=st.lists(_line_edit, min_size=1, max_size=6))
def test_line_edits(text, edits):
    lines = text.splitlines(keepends=True)
    for kind, where in edits:
        if not lines:
            break
        i = int(where * len(lines))
        if kind == "delete":
            del lines[i]
        else:
            lines.insert(i, lines[i])
    check("".join(lines))
