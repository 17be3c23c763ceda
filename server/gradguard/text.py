"""Lines, offsets and position encodings of a text, in one place.

Lines are split where Python's tokenizer splits them (``\\r\\n``, ``\\r``, ``\\n``), which is also where LSP
splits them; ``str.splitlines`` would also split on form feeds and other separators, so positions would
drift.  gradguard's own positions are 1-based lines and 1-based columns counted in code points; an LSP
client counts columns in the code units of the negotiated encoding (``utf-8``, ``utf-16``, ``utf-32``).
Edits of a text (``TextEdit``s: a fix's, an editor's) are made, compared and followed here too.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .diagnostics import TextEdit

LINE_BREAK = re.compile(r"\r\n|\r|\n")

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"  # the values of LSP's PositionEncodingKind


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` without their line breaks (a trailing newline gives a last empty line)."""
    if "\r" not in text:  # the usual case, and ``str.split`` costs a tenth of the pattern's split
        return text.split("\n")
    return LINE_BREAK.split(text)


def split_lines_kept(text: str) -> list[str]:
    """The lines of ``text``, each with its line break (an empty text is one empty line)."""
    starts = line_starts(text)
    ends = starts[1:] + [len(text)]
    return [text[a:b] for a, b in zip(starts, ends) if a < b or a == 0]


def unified_diff(old: str, new: str, path: str) -> str:
    """``old`` -> ``new`` as a unified diff of ``path``, lines split as everywhere else."""
    if old == new:
        return ""
    diff = difflib.unified_diff(
        split_lines_kept(old), split_lines_kept(new), fromfile=f"a/{path}", tofile=f"b/{path}"
    )
    out = []
    for line in diff:
        out.append(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def line_starts(text: str) -> list[int]:
    """The code-point offset where each line starts."""
    return [0, *(m.end() for m in LINE_BREAK.finditer(text))]


def line_ends(text: str) -> list[int]:
    """The code-point offset where each line's content ends (before its line break)."""
    return [*(m.start() for m in LINE_BREAK.finditer(text)), len(text)]


def newline(text: str) -> str:
    """The text's first line break (``\\n`` when it has none): what code added to it should use."""
    m = LINE_BREAK.search(text)
    return m.group(0) if m else "\n"


def position(starts: list[int], offset: int) -> tuple[int, int]:
    """1-based (line, column) of a code-point offset, given the text's ``line_starts``."""
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo + 1, offset - starts[lo] + 1


def code_point_column(line: str, byte_offset: int) -> int:
    """The 0-based code-point column of ``byte_offset`` UTF-8 bytes into ``line`` (``ast`` counts columns in bytes);
    a cut through a character counts only the characters before it."""
    if line.isascii():
        return byte_offset
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def code_units(text: str, encoding: str | None) -> int:
    """Length of ``text`` in the code units of a position encoding (UTF-16 unless another is named)."""
    if encoding == UTF32:
        return len(text)
    if encoding == UTF8:
        return len(text.encode("utf-8", "surrogatepass"))
    if text.isascii():
        return len(text)
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)  # utf-16: astral chars are pairs


def code_points(line: str, units: int, encoding: str | None) -> int:
    """Code-point index of the character at ``units`` code units into ``line`` (clamped to its length)."""
    if encoding == UTF32 or line.isascii():
        return max(0, min(units, len(line)))
    counted = 0
    for index, ch in enumerate(line):
        if counted >= units:
            return index
        if encoding == UTF8:
            counted += len(ch.encode("utf-8", "surrogatepass"))
        else:
            counted += 2 if ord(ch) > 0xFFFF else 1
    return len(line)


def text_digest(text: str) -> str:
    """A short digest of ``text``: which text a fix's edits were made for (``Fix.base``)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def diff_edits(old: str, new: str) -> tuple[TextEdit, ...]:
    """The edits that turn ``old`` into ``new``: one per changed region, trimmed to what really changes."""
    if old == new:
        return ()
    old_lines, new_lines = split_lines_kept(old), split_lines_kept(new)
    starts = line_starts(old)
    old_offsets = [0]
    for line in old_lines:
        old_offsets.append(old_offsets[-1] + len(line))
    edits = []
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        a, b = old_offsets[i1], old_offsets[i2]
        old_chunk, new_chunk = old[a:b], "".join(new_lines[j1:j2])
        prefix = 0
        limit = min(len(old_chunk), len(new_chunk))
        while prefix < limit and old_chunk[prefix] == new_chunk[prefix]:
            prefix += 1
        suffix = 0
        while suffix < limit - prefix and old_chunk[-1 - suffix] == new_chunk[-1 - suffix]:
            suffix += 1
        start, end = a + prefix, b - suffix
        text = new_chunk[prefix : len(new_chunk) - suffix]
        (line, column), (end_line, end_column) = position(starts, start), position(starts, end)
        edits.append(TextEdit(line, column, end_line, end_column, text))
    return tuple(edits)


def apply_edits(text: str, edits: Iterable[TextEdit | Mapping[str, Any]]) -> str:
    """Apply edits (1-based code-point positions, clamped to the text) to ``text``: ``TextEdit``s, or their json
    shape (``Diagnostic.to_json``'s, a code action's ``data``).  The one rule for overlaps: edits may touch, never
    overlap (``ValueError``); insertions at one place go in the order given, as an editor makes them.

    Lines are split like the server splits them (``\\r\\n``, ``\\r``, ``\\n``)."""
    starts = line_starts(text)
    ends = line_ends(text)

    def offset(line: int, column: int) -> int:
        index = max(0, min(line - 1, len(starts) - 1))
        return min(starts[index] + max(0, column - 1), ends[index])

    def span(e: TextEdit | Mapping[str, Any]) -> tuple[int, int, str]:
        if isinstance(e, Mapping):
            return offset(e["line"], e["column"]), offset(e["end_line"], e["end_column"]), e["new_text"]
        return offset(e.line, e.column), offset(e.end_line, e.end_column), e.new_text

    spans = sorted((span(e) for e in edits), key=lambda s: (s[0], s[1]))
    out, cursor = [], 0
    for start, end, new_text in spans:
        if start < cursor:
            raise ValueError("overlapping edits")
        out.append(text[cursor:start])
        out.append(new_text)
        cursor = end
    out.append(text[cursor:])
    return "".join(out)


def line_after(edits: Iterable[TextEdit], line: int) -> int:
    """Where line ``line`` of the text, which no edit touches, is once ``edits`` are made: moved by the lines the
    edits ending at or before its start add or remove (a fix checks its candidate for a finding by its line)."""
    shift = 0
    for e in edits:
        if (e.end_line, e.end_column) <= (line, 1):
            shift += e.new_text.count("\n") - (e.end_line - e.line)
    return line + shift
