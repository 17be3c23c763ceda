"""The hover over a finding: what the diagnostic does not already show.  The editor shows the message next to
the squiggle, so the hover gives the rule's name and summary, the first paragraph of its explanation (what
torch does, the rule's docs), what its quick fix will do (title, safe or not, the lines before and after) or,
without one, how to fix it by hand, and a link to the rule's page.

Markdown only for a client that says it renders it (``textDocument.hover.contentFormat``); others (eglot
without markdown-mode, a plain terminal client) get plain text, or they would show ``**`` and backticks.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from lsprotocol import types

from ..diagnostics import Diagnostic
from ..doc_links import rule_doc_url
from ..rules import RULES_BY_CODE
from ..text import apply_edits, split_lines

_CODE_SPAN = re.compile(r"`([^`]*)`")
_BOLD = re.compile(r"\*\*([^*]*)\*\*")
MAX_FIX_LINES = 8  # a longer change is summed up by its line count
UNKNOWN = "unknown"  # a finding's fix when it could not be built (kept from the last text that parsed)


def wants_markdown(caps: types.ClientCapabilities | None) -> bool:
    hover = caps.text_document.hover if caps is not None and caps.text_document is not None else None
    formats = hover.content_format if hover is not None else None
    return bool(formats) and types.MarkupKind.Markdown in formats


def _plain(text: str) -> str:
    """Markdown code spans and bold as their text: "`x += 1` on **h**" -> "x += 1 on h"."""
    return _BOLD.sub(r"\1", _CODE_SPAN.sub(r"\1", text))


def _first_paragraph(markdown: str) -> str:
    return markdown.strip().split("\n\n")[0].strip()


def fix_change(fix: dict[str, Any], uri: str, text: str) -> tuple[list[str], list[str]] | None:
    """The lines of ``text`` (part ``uri``) the fix's edits touch, before and after; None if it edits none."""
    edits = [e for e in fix.get("edits") or [] if isinstance(e, dict) and e.get("uri", uri) == uri]
    try:
        first, last = min(e["line"] for e in edits), max(e["end_line"] for e in edits)
        before, after = split_lines(text), split_lines(apply_edits(text, edits))
    except (KeyError, TypeError, ValueError):  # no edit here, or one that is not ours
        return None
    grown = len(after) - len(before)
    return before[first - 1:last], after[first - 1:last + grown]


def _fix_parts(lsp: types.Diagnostic, fix: Any, uri: str, text: str, version: int | None
               ) -> tuple[str, str, list[str]] | None:
    """(title, safety, diff lines) of the diagnostic's ``fix`` (as in its ``data``); the diff only when ``text``
    is the one it was made on."""
    data = lsp.data if isinstance(lsp.data, dict) else {}
    if not isinstance(fix, dict) or not fix.get("edits"):
        return None
    safety = "safe: Fix all applies it" if fix.get("safe") is True else "unsafe: review it; Fix all leaves it"
    change = fix_change(fix, uri, text) if data.get("version") == version else None
    diff: list[str] = []
    if change is not None:
        old, new = change
        if len(old) + len(new) <= 2 * MAX_FIX_LINES:
            diff = [f"- {line}" for line in old] + [f"+ {line}" for line in new]
        else:
            diff = [f"({len(old)} lines become {len(new)})"]
    return str(fix.get("title") or f"Fix {lsp.code}"), safety, diff


def _markdown(diag: Diagnostic, lsp: types.Diagnostic, fix: tuple | str | None, docs_url: str | None) -> str:
    rule = RULES_BY_CODE.get(diag.code)
    if rule is None:  # an input problem (GG900, GG903): the message is all there is
        return f"**gradguard {diag.code}**: {diag.message}"
    parts = [f"**gradguard {rule.code} `{rule.name}`**: {rule.summary}", _first_paragraph(rule.explanation)]
    if fix is UNKNOWN:
        pass  # neither a fix nor "no automatic fix": it is not known
    elif fix is not None:
        title, safety, diff = fix
        parts.append(f"**Quick fix** ({safety}): {title}" + ("\n```diff\n" + "\n".join(diff) + "\n```" if diff else ""))
    else:
        parts.append(f"**No automatic fix.** {_first_paragraph(rule.fix_advice)}")
    url = rule_doc_url(rule.code, docs_url)
    return "\n\n".join(parts if url is None else [*parts, f"[{rule.code} documentation]({url})"])


def _plaintext(diag: Diagnostic, lsp: types.Diagnostic, fix: tuple | str | None, docs_url: str | None) -> str:
    rule = RULES_BY_CODE.get(diag.code)
    if rule is None:
        return f"gradguard {diag.code}: {_plain(diag.message)}"
    parts = [f"gradguard {rule.code} ({rule.name}): {_plain(rule.summary)}", _plain(_first_paragraph(rule.explanation))]
    if fix is UNKNOWN:
        pass
    elif fix is not None:
        title, safety, diff = fix
        parts.append("\n".join([f"Quick fix ({safety}): {_plain(title)}", *(f"  {line}" for line in diff)]))
    else:
        parts.append(f"No automatic fix. {_plain(_first_paragraph(rule.fix_advice))}")
    url = rule_doc_url(rule.code, docs_url)
    return "\n\n".join(parts if url is None else [*parts, f"{rule.code} documentation: {url}"])


def contents(hits: Iterable[tuple[Diagnostic, types.Diagnostic, Any]], uri: str, text: str, version: int | None,
             docs_url: str | None, markdown: bool) -> types.MarkupContent:
    render, kind, sep = (_markdown, types.MarkupKind.Markdown, "\n\n---\n\n") if markdown \
        else (_plaintext, types.MarkupKind.PlainText, "\n\n")
    return types.MarkupContent(kind=kind, value=sep.join(
        render(d, lsp, UNKNOWN if fix is UNKNOWN else _fix_parts(lsp, fix, uri, text, version), docs_url)
        for d, lsp, fix in hits))


def hover(hits: list[tuple[Diagnostic, Any, Any]], caps: Any, docs_url: str | None, uri: str, text: str,
          version: int | None) -> types.Hover | None:
    """The hover over ``hits`` (``Document.shown_at``, each with its fix as in its ``data``, built for the hover, or
    ``UNKNOWN``) in part ``uri``, whose text is now ``text`` at ``version``."""
    if not hits:
        return None
    return types.Hover(contents=contents(hits, uri, text, version, docs_url, wants_markdown(caps)), range=hits[0][1].range)
