"""The hover adds what the diagnostic does not show: the rule's explanation (its docs) and what its quick fix
will do (title, safe or not, the lines before and after), or how to fix it by hand; never the message again."""

from __future__ import annotations

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient
from test_baseline import TRAIN
from test_lsp import URI, change_range, open_doc, rng, wait_publish

from gradguard.api import analyze_source
from gradguard.rules import RULES_BY_CODE

pytestmark = pytest.mark.asyncio


async def hover_at(client: LanguageClient, line: int, character: int) -> types.Hover | None:
    return await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line=line, character=character)))


async def test_hover_explains_the_rule_and_the_fix(client: LanguageClient):
    open_doc(client, TRAIN)  # `y.mul_(2)` on line 6 modifies sigmoid's saved output: fix `y = y.mul(2)`
    (d,) = await wait_publish(client, URI, version=1)
    value = (await hover_at(client, 5, 5)).contents.value
    rule = RULES_BY_CODE["GG001"]
    assert d.message not in value
    assert value.startswith(f"**gradguard GG001 `{rule.name}`**: {rule.summary}")
    assert rule.explanation.strip().split("\n\n")[0] in value  # what torch does, from the rule's docs
    assert "fix" not in d.data  # published before any fix is built: the hover builds its own
    assert f"**Quick fix** (safe: Fix all applies it): {analyze_source(TRAIN).diagnostics[0].fix.title}" in value
    assert "```diff\n-     y.mul_(2)\n+     y = y.mul(2)\n```" in value


@pytest.mark.init_options({"gradguard": {}, "run": "onSave"})
async def test_hover_shows_no_fix_lines_for_a_text_they_were_not_made_on(client: LanguageClient):
    open_doc(client, TRAIN)
    (d,) = await wait_publish(client, URI, version=1)
    change_range(client, rng(5, 0, 5, 0), "    # a comment\n", version=2)  # not analysed before a save
    value = (await hover_at(client, 5, 5)).contents.value
    assert analyze_source(TRAIN).diagnostics[0].fix.title in value and "```diff" not in value


@pytest.mark.hover_formats([types.MarkupKind.PlainText])
async def test_plain_text_hover_of_the_fix(client: LanguageClient):
    open_doc(client, TRAIN)
    await wait_publish(client, URI, version=1)
    text = (await hover_at(client, 5, 5)).contents.value
    assert "`" not in text and "**" not in text
    assert "Quick fix (safe: Fix all applies it): Write out of place: y = y.mul(2)\n  -     y.mul_(2)\n  +     y = y.mul(2)" in text


# A module global leaf written in place inside a function: no automatic fix (`no_grad` would hide the update from
# the gradient, and rebinding a global needs a `global` statement the fixes do not write).
GLOBAL_LEAF = "import torch\nx = torch.zeros(3, requires_grad=True)\n\n\ndef shift():\n    x.add_(1)\n\n\nshift()\n" \
              "x.sum().backward()\n"


async def test_hover_without_a_fix_says_how_to_fix_it(client: LanguageClient):
    open_doc(client, GLOBAL_LEAF)
    (d,) = await wait_publish(client, URI, version=1)
    assert analyze_source(GLOBAL_LEAF).diagnostics[0].fix is None
    value = (await hover_at(client, 5, 5)).contents.value
    advice = RULES_BY_CODE["GG002"].fix_advice.strip().split("\n\n")[0]
    assert f"**No automatic fix.** {advice}" in value and "Quick fix" not in value
