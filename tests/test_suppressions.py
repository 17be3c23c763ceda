"""One regex reads and writes suppression comments (gradguard.suppressions); positions in gradguard.text."""

from gradguard import text
from gradguard.suppressions import ALL, add_code, suppressed_codes


def test_reading() -> None:
    assert suppressed_codes("x.add_(1)  # noqa") == {ALL}
    assert suppressed_codes("x.add_(1)  # gradguard: ignore") == {ALL}
    assert suppressed_codes("x.add_(1)  # gradguard: ignore[gg001, GG002]") == {"GG001", "GG002"}
    assert suppressed_codes("x.add_(1)  # noqa: GG001 # gradguard: ignore[GG105]") == {"GG001", "GG105"}
    assert suppressed_codes("x.add_(1)  # noqa: E501") == {"E501"}
    assert suppressed_codes("x.add_(1)") is None


def test_writing_adds_to_the_bracket_or_appends_and_never_repeats() -> None:
    line = "x.add_(1)  # gradguard: ignore[GG001]"
    start, end, new = add_code(line, "GG002")
    assert line[:start] + new + line[end:] == "x.add_(1)  # gradguard: ignore[GG001, GG002]"
    start, end, new = add_code("x.add_(1)   ", "GG001")
    assert "x.add_(1)   "[:start] + new == "x.add_(1)  # gradguard: ignore[GG001]"
    assert add_code(line, "GG001") is None
    assert add_code("x.add_(1)  # noqa", "GG001") is None  # a bare noqa already silences it
    assert add_code("y = x + \\", "GG001") is None  # no comment after a line continuation


def test_text_positions() -> None:
    assert text.split_lines("a\r\nb\rc\n") == ["a", "b", "c", ""]
    # Without a carriage return (str.split's shortcut): only newlines split, never form feeds or U+2028.
    assert text.split_lines("a\x0cb\u2028c\n\nd") == ["a\x0cb\u2028c", "", "d"]
    assert text.split_lines("") == [""] and text.split_lines("a\n") == ["a", ""]
    assert text.line_starts("a\r\nb\n") == [0, 3, 5]
    assert text.position(text.line_starts("a\r\nb\n"), 4) == (2, 2)
    assert [text.code_units("a😀", e) for e in (text.UTF8, text.UTF16, text.UTF32)] == [5, 3, 2]
    assert [text.code_points("a😀b", 3, e) for e in (text.UTF16, text.UTF32)] == [2, 3]
