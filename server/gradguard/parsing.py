"""Bytes to an ``ast`` tree, with a cheap text prefilter in front.

Most real files contain no in-place idiom at all, so a regular-expression scan
decides whether parsing is worth it.  We parse with ``ast`` (fast, C); libcst is
only used later, by the fixes, on files that have findings.
"""

from __future__ import annotations

import ast
import bisect
import io
import keyword as keyword_module
import re
import sys
import tokenize
import warnings
from dataclasses import dataclass, field
from typing import NamedTuple

from . import bounds
from .text import split_lines

MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Unreadable:
    reason: str


@dataclass(frozen=True)
class SyntaxProblem:
    message: str
    line: int
    column: int


def decode(data: bytes) -> str | Unreadable:
    """Decode like Python does (PEP 263 cookie, BOM, default UTF-8); refuse binary data."""
    if len(data) > MAX_BYTES:
        return Unreadable(f"file is larger than {MAX_BYTES // (1024 * 1024)} MiB; not analysed")
    if b"\0" in data[:8192]:
        return Unreadable("binary file (contains NUL bytes); not analysed")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, LookupError) as exc:
        return Unreadable(f"cannot decode file: {exc}")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return Unreadable(f"not valid {exc.encoding} text (byte 0x{data[exc.start]:02x} on line {line}); not analysed")


# Every finding needs an in-place write (an augmented assignment, a subscript store, a
# trailing-underscore call, an ``out=``/``inplace=`` keyword, an optimizer step) or a graph
# rebuilt from values (``torch.tensor(t)``, ``.item()``, numpy).  Text with none of these is skipped.
# Each alternative: what must come just before it ("" nothing, r"\b" a word boundary, "[A-Za-z0-9]" one of
# those characters), and the rest.
_CANDIDATE_PARTS: tuple[tuple[str, str], ...] = (
    ("", r"[-+*/@%&|^]=(?!=)"),  # x += y (also <=, >=: cheap, fine)
    ("", r"\]\s*=[^=]"),  # x[i] = v
    ("[A-Za-z0-9]", r"_\s*[(),]"),  # x.add_(...), F.relu_(...), partial(F.relu_)
    (r"\b", r"inplace\s*="),
    (r"\b", r"out\s*="),
    ("", r"\.step\s*\("),
    ("", r"\.grad\b"),  # a gradient read after a backward: a cut upstream may starve it (GG103)
    (r"\b", r"(?:tensor|as_tensor|asarray|from_numpy|new_tensor)\s*\("),
    ("", r"\.(?:item|tolist|numpy)\s*\("),
    (r"\b", r"float\s*\("),
    ("", r"\.register_(?:full_backward_pre_)?hook\s*\("),  # a gradient hook may write its gradient (GG108)
    (r"\b", r"(?:no_grad|inference_mode)\s*\("),  # a leaf requiring grad may be rebound under it (GG109)
    ("", r"\.backward\s*\("),  # a loss may have terms a cut left without gradient (GG103)
)
CANDIDATE = re.compile("|".join(before + rest for before, rest in _CANDIDATE_PARTS))

# ``CANDIDATE.search``, faster: Python's regex engine scans quickly for a pattern's literal start, but not for one
# that starts with ``\b`` or a character class; those parts are searched without it and the character before
# each match is checked here.
_CANDIDATE_FREE = re.compile("|".join(rest for before, rest in _CANDIDATE_PARTS if not before))
_CANDIDATE_AFTER = tuple((before, re.compile(rest)) for before, rest in _CANDIDATE_PARTS if before)


def _word_character(c: str) -> bool:
    return c.isalnum() or c == "_"  # what ``\w`` matches in a str pattern


def word_starts(pattern: re.Pattern, text: str) -> bool:
    """Whether ``pattern`` matches in ``text`` at the start of a word: ``re.search(r"\b" + pattern.pattern, text)``
    for a pattern whose matches start with a word character, about four times faster (a leading ``\b`` leaves the
    regex engine no first character to skip ahead to)."""
    match = pattern.search(text)
    while match is not None:
        start = match.start()
        if start == 0 or not _word_character(text[start - 1]):
            return True
        match = pattern.search(text, start + 1)
    return False


def has_candidate(text: str) -> bool:
    """``CANDIDATE.search(text) is not None``."""
    if _CANDIDATE_FREE.search(text):
        return True
    for before, rest in _CANDIDATE_AFTER:
        if before == r"\b":  # every such part starts with a word character
            if word_starts(rest, text):
                return True
            continue
        match = rest.search(text)
        while match is not None:
            start = match.start()
            if start > 0 and re.fullmatch(before, text[start - 1]):
                return True
            match = rest.search(text, start + 1)
    return False


def source_lines(text: str) -> list[str]:
    """Split lines exactly where Python's tokenizer does (``str.splitlines`` also splits on form feeds)."""
    return split_lines(text)


def may_contain_findings(text: str) -> bool:
    return has_candidate(text)


def parse(text: str) -> ast.Module | SyntaxProblem:
    """The file's tree, bounded in depth (``bounds``): expressions too deep to analyse are placeholders.

    Python's own parser gives up on expressions some 3,000 levels deep (RecursionError, MemoryError: "too
    deep", not "invalid"); the file is then parsed one top-level statement at a time, and only the statements
    that are too deep become placeholders."""
    parsed = _bounded(text)
    return parsed if isinstance(parsed, SyntaxProblem) else parsed[0]


def parse_document(text: str, lines: list[str] | None = None) -> Parsed | SyntaxProblem:
    """``parse``, kept with the text's lines and the tree's placeholders, for ``reparse`` at the next edit."""
    parsed = _bounded(text)
    if isinstance(parsed, SyntaxProblem):
        return parsed
    return Parsed(source_lines(text) if lines is None else lines, *parsed)


def _bounded(text: str) -> tuple[ast.Module, tuple[bounds.Unanalysed, ...]] | SyntaxProblem:
    try:
        tree = _parse(text)
    except SyntaxError as exc:
        return _syntax_problem(exc)
    except ValueError as exc:
        return SyntaxProblem(f"cannot parse: {exc}", 1, 1)
    except (RecursionError, MemoryError):
        tree = _parse_statements(text)
        if isinstance(tree, SyntaxProblem):
            return tree
    return tree, tuple(bounds.bound(tree))


def _parse(text: str) -> ast.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences in user code are not our business
        return ast.parse(text, type_comments=False)


# Syntax newer than the running interpreter parses, recognised on the line Python's parser stopped at:
# (the Python version that brought it, a regex on the line or on the error message, what it is).
NEWER_SYNTAX: tuple[tuple[tuple[int, int], str, str, str], ...] = (
    ((3, 12), "line", r"^\s*type\s+[A-Za-z_]\w*\s*(\[.*\])?\s*=", "a `type` alias statement (PEP 695)"),
    ((3, 12), "line", r"^\s*(async\s+)?def\s+[A-Za-z_]\w*\s*\[", "a generic function `def f[T](...)` (PEP 695)"),
    ((3, 12), "line", r"^\s*class\s+[A-Za-z_]\w*\s*\[", "a generic class `class C[T]` (PEP 695)"),
    ((3, 12), "message", r"^f-string", "an f-string that only Python 3.12 parses (PEP 701)"),
    ((3, 14), "message", r"multiple exception types must be parenthesized",
     "`except A, B:` without parentheses (PEP 758)"),
)


def newer_syntax(exc: SyntaxError) -> str | None:
    """Why a syntax error may be code newer than this Python, when it looks like it: a clause for the message."""
    for version, where, pattern, what in NEWER_SYNTAX:
        if sys.version_info >= version:
            continue
        subject = (exc.text or "") if where == "line" else (exc.msg or "")
        if re.search(pattern, subject):
            running = f"{sys.version_info.major}.{sys.version_info.minor}"
            return (f"this looks like {what}, which needs Python {version[0]}.{version[1]}, and gradguard runs on "
                    f"Python {running}, which is older than the code: run gradguard with Python "
                    f"{version[0]}.{version[1]} or newer")
    return None


def _syntax_problem(exc: SyntaxError, line_offset: int = 0) -> SyntaxProblem:
    line = (exc.lineno or 1) + line_offset
    column = exc.offset or 1
    newer = newer_syntax(exc)
    if newer is not None:
        return SyntaxProblem(f"syntax error: {exc.msg} (line {line}); {newer}; gradguard cannot analyse this file",
                             line, column)
    return SyntaxProblem(f"syntax error: {exc.msg} (line {line}); gradguard cannot analyse this file", line, column)


_CONTINUES = {"else", "elif", "except", "finally"}  # top-level lines that belong to the statement before


def _parse_statements(text: str) -> ast.Module | SyntaxProblem:
    """The module parsed one top-level statement at a time, each too deep for Python's parser replaced by an
    ``Unanalysed`` placeholder (binding the names it assigns to an unknown value).  Tokenizing does not
    recurse, so it finds where the statements start whatever their depth."""
    lines = source_lines(text)
    starts = _statement_starts(text)
    if starts is None:
        return _whole_file_unanalysed(lines)
    body: list[ast.stmt] = []
    for (first, tokens), (following, _) in zip(starts, [*starts[1:], (len(lines) + 1, [])]):
        chunk = "\n".join(lines[first - 1: following - 1])
        try:
            part = _parse(chunk)
        except SyntaxError as exc:
            return _syntax_problem(exc, first - 1)
        except ValueError as exc:
            return SyntaxProblem(f"cannot parse: {exc}", 1, 1)
        except (RecursionError, MemoryError):
            last = following - 1
            while last > first and not lines[last - 1].strip():
                last -= 1
            body.append(_skipped_statement(tokens, first, last, len(lines[last - 1])))
            continue
        ast.increment_lineno(part, first - 1)
        body.extend(part.body)
    return ast.Module(body=body, type_ignores=[])


def _statement_starts(text: str) -> list[tuple[int, list[tokenize.TokenInfo]]] | None:
    """(first line, tokens of its first logical line) of every top-level statement; None if the text does not
    tokenize (then nothing can be said of it)."""
    starts: list[tuple[int, list[tokenize.TokenInfo]]] = []
    indent, at_start, previous = 0, True, ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.INDENT:
                indent += 1
            elif token.type == tokenize.DEDENT:
                indent -= 1
            elif token.type in (tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER):
                continue
            elif token.type == tokenize.NEWLINE:
                at_start = True
                continue
            if at_start and indent == 0 and token.type not in (tokenize.INDENT, tokenize.DEDENT):
                if token.string not in _CONTINUES and previous != "@" or not starts:
                    starts.append((token.start[0], []))
                previous = token.string
                at_start = False
            if starts and not at_start and len(starts[-1][1]) < 64:
                starts[-1][1].append(token)
    except (tokenize.TokenError, SyntaxError):
        return None
    return starts


_LAYOUT_TOKENS = frozenset({tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT,
                            tokenize.ENCODING})


def _skipped_statement(tokens: list[tokenize.TokenInfo], first: int, last: int, end_column: int) -> ast.stmt:
    """A placeholder for a top-level statement Python's parser gave up on: ``names = <unanalysed>``, so that
    what it assigns is unknown to the statements after it rather than left at an older value."""
    words = [t.string for t in tokens if t.type in (tokenize.NAME, tokenize.OP)]
    # The statement's own first token: `2.0 @ w @ ...` is a product, not a decorator, though `@` is its first word.
    lead = next((t for t in tokens if t.type not in _LAYOUT_TOKENS), None)
    names: list[str] = []
    what = "the statement"
    decorated = lead is not None and lead.type == tokenize.OP and lead.string == "@"
    if decorated or words[:1] in (["def"], ["class"]) or words[:2] == ["async", "def"]:
        keyword = "class" if "class" in words else "def"
        index = words.index(keyword) + 1 if keyword in words else len(words)
        if index < len(words):
            names = [words[index]]
            what = f"the {'class' if keyword == 'class' else 'function'} `{words[index]}`"
    elif "=" in words:
        before = words[: words.index("=")]
        names = [w for i, w in enumerate(before) if w.isidentifier() and (i == 0 or before[i - 1] != ".")
                 and not keyword_module.iskeyword(w)]
    positions = dict(lineno=first, col_offset=0, end_lineno=last, end_col_offset=end_column)
    value = bounds.Unanalysed(what, "is nested too deeply for Python's own parser to build", **positions)
    if not names:
        return ast.Expr(value=value, **positions)
    targets = [ast.Name(id=n, ctx=ast.Store(), **positions) for n in names]
    return ast.Assign(targets=[ast.Tuple(elts=targets, ctx=ast.Store(), **positions) if len(targets) > 1 else targets[0]],
                      value=value, **positions)


def _whole_file_unanalysed(lines: list[str]) -> ast.Module:
    last = len(lines)
    positions = dict(lineno=1, col_offset=0, end_lineno=last, end_col_offset=len(lines[-1]))
    value = bounds.Unanalysed("the file", "is nested too deeply for Python's own parser to build", **positions)
    return ast.Module(body=[ast.Expr(value=value, **positions)], type_ignores=[])


def first_line(stmt: ast.stmt) -> int:
    """A statement's first line, counting a definition's decorators (``@torch.no_grad()`` is part of it)."""
    decorators = getattr(stmt, "decorator_list", None)  # (called thousands of times an edit: no list when none)
    return min(stmt.lineno, *(d.lineno for d in decorators)) if decorators else stmt.lineno


@dataclass(frozen=True)
class Layout:
    """Where a tree's lines are when they are not the text's own (``reparse_in_place``).

    A line inserted in the middle of a file would move every statement below it; parsing them again for their
    new positions was half of a line edit's cost (and most of its garbage).  Instead the changed statements are
    parsed at fresh line numbers past the end of ``lines``, and every other statement keeps the line numbers it
    had.  So the tree's positions index ``lines`` (the tree's own lines: each statement's text where its
    positions say, and blanks where a replaced statement was), and ``blocks`` says where each top-level
    statement (in ``tree.body`` order) is in the text: (its first line, its last line, the text's first line).
    Positions compare as before inside one top-level statement, not across two."""

    lines: list[str]
    blocks: tuple[tuple[int, int, int], ...]
    _ordered: list[tuple[int, int, int]] = field(init=False, repr=False, compare=False)
    _starts: list[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ordered = sorted(self.blocks)
        object.__setattr__(self, "_ordered", ordered)
        object.__setattr__(self, "_starts", [first for first, _, _ in ordered])

    def text_line(self, line: int) -> int:
        """The text's line of the tree's ``line`` (a line between statements moves with the one before it)."""
        i = bisect.bisect_right(self._starts, line) - 1
        if i < 0:
            return line
        first, _, text_first = self._ordered[i]
        return text_first + line - first


class Parsed(NamedTuple):
    """A successful parse, kept per open document so that the next keystroke can reuse most of it.

    ``skipped``: the tree's placeholders (``bounds.Unanalysed``) in source order, as ``bounds.bound`` made or
    found them.  They are kept here rather than found again by walking the whole tree at every edit (that walk
    cost about a tenth of a line edit in a 3,000-line file); ``reparse`` keeps those of the statements it
    reuses.  ``layout``: None when the tree's positions are the text's; else where its lines are (``Layout``)."""

    lines: list[str]
    tree: ast.Module
    skipped: tuple[bounds.Unanalysed, ...]
    layout: Layout | None = None

    @property
    def tree_lines(self) -> list[str]:
        """The lines the tree's positions index."""
        return self.lines if self.layout is None else self.layout.lines

    def text_line(self, line: int) -> int:
        """The text's line of the tree's ``line``."""
        return line if self.layout is None else self.layout.text_line(line)


def reparse(lines: list[str], previous: Parsed, positions_after: bool = True) -> Parsed | None:
    """The parse of ``lines`` built from ``previous``: when every changed line lies inside top-level statements,
    only those statements are parsed again (padded with blank lines, so positions come out right) and the
    others are reused.  None when that does not apply or the changed statements do not parse on their own;
    the caller then parses the whole text.  A change between top-level statements (a blank line typed between two
    functions) parses from the statement before it to the end.

    When lines were added or removed, the statements after the change need new positions: with
    ``positions_after`` (the default) they are parsed again with the changed ones (the statements above are
    still reused, so Enter in the middle of a file parses half of it); without, they are reused with their old
    positions, which is enough for a look at the changed statements alone (a fix checking its own result).

    Splicing is sound because a top-level statement starts at column 0 with nothing open (no bracket, no
    string, no indentation), so the text around the changed statements tokenizes as it did.  A ``previous``
    with a ``Layout`` (``reparse_changed_only``) is declined: its positions are not the text's."""
    old_lines, old, old_skipped, layout = previous
    if layout is not None:
        return None  # its positions are not the text's: a full parse gives them
    delta = len(lines) - len(old_lines)
    changed = _changed_lines(lines, old_lines)
    if changed is None:
        return Parsed(lines, old, old_skipped)
    first, last = changed
    if first < 0:
        return None
    body = old.body
    starts = [first_line(s) for s in body]
    start = bisect.bisect_right(starts, first + 1) - 1  # 1-based lines from here
    end = bisect.bisect_right(starts, last + 1) - 1
    inside = start >= 0 and body[start].end_lineno >= first + 1 and body[end].end_lineno >= last + 1
    if start < 0 or not (inside or positions_after):
        return None  # before the first statement; or a changed line between statements, where anything may change
    while start > 0 and body[start - 1].end_lineno >= starts[start]:
        start -= 1  # `a = 1; b = 2`: statements that share a line are parsed together
    if inside and not (delta and positions_after):
        while end + 1 < len(body) and starts[end + 1] <= body[end].end_lineno:
            end += 1
        top, bottom = starts[start], body[end].end_lineno + delta
    else:  # lines moved, or a change between statements: parse from the statement at the change to the end
        end, top, bottom = len(body) - 1, starts[start], len(lines)  # (copying those below moved costs as much)
    segment = "\n" * (top - 1) + "\n".join(lines[top - 1:bottom]) + "\n"
    parsed = _bounded(segment)
    if isinstance(parsed, SyntaxProblem):
        return None
    tree, skipped = parsed
    below = body[end].end_lineno  # old lines: the reused statements below start after it
    skipped = (*(p for p in old_skipped if p.lineno < top), *skipped, *(p for p in old_skipped if p.lineno > below))
    return Parsed(lines, ast.Module(body=[*body[:start], *tree.body, *body[end + 1:]], type_ignores=[]), skipped)


SPARE_TREE_LINES = 10_000  # fresh line numbers a layout may use beyond twice the text's before a full parse


def reparse_changed_only(lines: list[str], previous: Parsed) -> Parsed | None:
    """The parse of ``lines`` built from ``previous`` by parsing only the top-level statements the change is in
    (with the statement before a change between statements, and the one after it); every other statement is
    reused with the line numbers it had, so a line inserted in the middle of a file costs what a keystroke
    does.  When lines were added or removed the changed statements get fresh line numbers past the tree's
    lines, and the result has a ``Layout``; keystrokes keep them where they were.  None when the changed
    statements do not parse on their own, the change is above the first statement, or the layout has used
    its spare lines: the caller then parses the whole text (which starts the layout afresh).

    Sound for the reason ``reparse`` is: a top-level statement starts at column 0 with nothing open."""
    old_lines, old, old_skipped, layout = previous
    body = old.body
    if layout is None:
        tree_lines = old_lines
        blocks = tuple((first_line(s), s.end_lineno, first_line(s)) for s in body)
    else:
        tree_lines, blocks = layout.lines, layout.blocks
    delta = len(lines) - len(old_lines)
    changed = _changed_lines(lines, old_lines)
    if changed is None:
        return Parsed(lines, old, old_skipped, layout)
    first, last = changed
    if first < 0:
        return None
    starts = [text_first for _, _, text_first in blocks]  # old text, 1-based
    ends = [text_first + end - begin for begin, end, text_first in blocks]
    start = bisect.bisect_right(starts, first + 1) - 1
    end = bisect.bisect_right(starts, last + 1) - 1
    if start < 0:
        return None
    while start > 0 and ends[start - 1] >= starts[start]:
        start -= 1  # `a = 1; b = 2`: statements that share a line are parsed together
    inside = ends[start] >= first + 1 and ends[end] >= last + 1
    to_the_end = False
    if not inside:  # a change between statements: the one after it too (a decorator typed above a def)
        to_the_end = end + 1 == len(body)
        end = min(end + 1, len(body) - 1)
    while end + 1 < len(body) and starts[end + 1] <= ends[end]:
        end += 1
    top = starts[start]
    bottom = len(lines) if to_the_end else ends[end] + delta  # new text, 1-based
    region = lines[top - 1:bottom]
    offsets = {text_first - begin for begin, _, text_first in blocks[start:end + 1]}
    if inside and delta == 0 and len(offsets) == 1:  # a keystroke: the statements stay on their tree lines
        base = top - offsets.pop()
        new_tree_lines = tree_lines if layout is None else list(tree_lines)
        if layout is not None:
            new_tree_lines[base - 1:base - 1 + len(region)] = region
    else:
        base = len(tree_lines) + 1
        if base + len(region) > 2 * len(lines) + SPARE_TREE_LINES:
            return None
        new_tree_lines = list(tree_lines)
        for begin, finish, _ in blocks[start:end + 1]:
            new_tree_lines[begin - 1:finish] = [""] * (finish - begin + 1)  # no stale text for jedi to read
        new_tree_lines.extend(region)
    parsed = _bounded("\n" * (base - 1) + "\n".join(region) + "\n")
    if isinstance(parsed, SyntaxProblem):
        return None
    tree, skipped = parsed
    replaced = blocks[start:end + 1]
    skipped = (*(p for p in old_skipped if not any(begin <= p.lineno <= finish for begin, finish, _ in replaced)),
               *skipped)
    new_body = [*body[:start], *tree.body, *body[end + 1:]]
    if layout is None and base == top:
        return Parsed(lines, ast.Module(body=new_body, type_ignores=[]), skipped)
    new_blocks = (*blocks[:start],
                  *((first_line(s), s.end_lineno, first_line(s) - base + top) for s in tree.body),
                  *((begin, finish, text_first + delta) for begin, finish, text_first in blocks[end + 1:]))
    return Parsed(lines, ast.Module(body=new_body, type_ignores=[]), skipped, Layout(new_tree_lines, new_blocks))


def _changed_lines(lines: list[str], old_lines: list[str]) -> tuple[int, int] | None:
    """The first and last changed lines of the old text (0-based); None when nothing changed.  Lines only
    inserted give the old lines on both sides (they must belong to the changed statements), or (-1, 0) when
    inserted before the first line."""
    first = next((i for i, (a, b) in enumerate(zip(lines, old_lines)) if a != b), min(len(lines), len(old_lines)))
    if first == len(lines) == len(old_lines):
        return None
    # The last changed line of the old text, from the end; the common tail never overlaps the common head.
    shorter = min(len(lines), len(old_lines))
    tail = next((k for k in range(shorter - first)
                 if lines[len(lines) - 1 - k] != old_lines[len(old_lines) - 1 - k]), shorter - first)
    last = len(old_lines) - 1 - tail
    if last < first:
        return (-1, 0) if first == 0 else (first - 1, first)
    return first, last
