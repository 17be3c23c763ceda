"""The hover over a finding: its message, the rule's summary and a link to the rule's page.

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

_CODE_SPAN = re.compile(r"`([^`]*)`")


def wants_markdown(caps: types.ClientCapabilities | None) -> bool:
    hover = caps.text_document.hover if caps is not None and caps.text_document is not None else None
    formats = hover.content_format if hover is not None else None
    return bool(formats) and types.MarkupKind.Markdown in formats


def _plain(text: str) -> str:
    """Markdown code spans as their text: "`x += 1` on `h`" -> "x += 1 on h"."""
    return _CODE_SPAN.sub(r"\1", text)


def _markdown(diag: Diagnostic, docs_url: str | None) -> str:
    rule = RULES_BY_CODE.get(diag.code)
    if rule is None:
        return f"**gradguard {diag.code}**: {diag.message}"
    text = f"**gradguard {rule.code} `{rule.name}`**: {diag.message}\n\n{rule.summary}"
    url = rule_doc_url(rule.code, docs_url)
    return text if url is None else f"{text}\n\n[{rule.code} documentation]({url})"


def _plaintext(diag: Diagnostic, docs_url: str | None) -> str:
    rule = RULES_BY_CODE.get(diag.code)
    if rule is None:
        return f"gradguard {diag.code}: {_plain(diag.message)}"
    text = f"gradguard {rule.code} ({rule.name}): {_plain(diag.message)}\n\n{_plain(rule.summary)}"
    url = rule_doc_url(rule.code, docs_url)
    return text if url is None else f"{text}\n\n{rule.code} documentation: {url}"


def contents(diags: Iterable[Diagnostic], docs_url: str | None, markdown: bool) -> types.MarkupContent:
    if markdown:
        return types.MarkupContent(
            kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(_markdown(d, docs_url) for d in diags)
        )
    return types.MarkupContent(
        kind=types.MarkupKind.PlainText, value="\n\n".join(_plaintext(d, docs_url) for d in diags)
    )


def hover(shown: list[tuple[Diagnostic, Any]], position: types.Position, caps: Any, docs_url: str | None) -> types.Hover | None:
    """The hover at ``position`` over the findings ``shown`` (pairs of a finding and its LSP diagnostic)."""
    hits = [(d, lsp) for d, lsp in shown if _contains(lsp.range, position)]
    if not hits:
        return None
    return types.Hover(contents=contents([d for d, _ in hits], docs_url, wants_markdown(caps)), range=hits[0][1].range)


def _contains(rng: types.Range, pos: types.Position) -> bool:
    return (rng.start.line, rng.start.character) <= (pos.line, pos.character) <= (rng.end.line, rng.end.character)
