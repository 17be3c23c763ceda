"""Suppression comments, read and written by one regex: ``# gradguard: ignore[GG001, ...]``, a bare
``# gradguard: ignore``, ``# noqa: GG001`` and a bare ``# noqa`` (which silences everything, as in flake8
and ruff).  The analysis reads them (``api``); the editor's "Suppress on this line" writes them."""

from __future__ import annotations

import re

ALL = "ALL"  # what a bare comment silences

SUPPRESSION = re.compile(
    r"#\s*(?:gradguard:\s*ignore(?P<bracket>\[(?P<gg>[^\]]*)\])?|noqa(?::\s*(?P<noqa>[A-Z0-9,\s]+))?)",
    re.IGNORECASE,
)


def _codes(listed: str) -> list[str]:
    return [c.strip() for c in listed.split(",") if c.strip()]


def suppressed_codes(line_text: str) -> frozenset[str] | None:
    """Codes the suppression comments of this line silence; ``{ALL}`` for a bare one; None if none."""
    found: set[str] = set()
    for m in SUPPRESSION.finditer(line_text):
        is_gradguard = m.group(0).lstrip("# \t")[:1].lower() == "g"
        listed = m.group("gg") if is_gradguard else m.group("noqa")
        if listed is None:
            return frozenset({ALL})
        found.update(c.upper() for c in _codes(listed))
    return frozenset(found) if found else None


def is_suppressed(code: str, line_text: str) -> bool:
    codes = suppressed_codes(line_text)
    return codes is not None and (ALL in codes or code in codes)


def add_code(line_text: str, code: str) -> tuple[int, int, str] | None:
    """The edit that silences ``code`` on this line: (start, end, new text), 0-based code-point columns.

    Adds the code to the line's ``# gradguard: ignore[...]``, or appends such a comment; None when the code is
    already silenced, or when a comment cannot go there (after a line continuation).
    """
    stripped = line_text.rstrip()
    if stripped.endswith("\\") or is_suppressed(code.upper(), line_text):
        return None
    for m in SUPPRESSION.finditer(line_text):
        if m.group("bracket") is not None:
            codes = _codes(m.group("gg"))
            return m.start("gg"), m.end("gg"), ", ".join([*codes, code])
    return len(stripped), len(line_text), f"  # gradguard: ignore[{code}]"
