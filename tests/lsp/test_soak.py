"""Soak: thousands of random incremental edits through a real client connection.

Random insertions (slices of fixture text, non-ASCII included) and deletions go to the server as
incremental ``didChange`` notifications, in bursts with short pauses so that analyses start, go stale and
get dropped while edits keep coming.  Hover and code-action requests are mixed in.  At the end:
- the server is alive and answers;
- the last publish is for the last version, and publishes never went back in version;
- the last publish equals ``api.analyze_source`` of the final text (positions, codes, messages), except
  that, when the final text does not parse, findings kept from the last good run may stand beside the
  syntax error (never on its line, and each still on a line of the text);
- after one more edit to a text that parses, the publish equals the analysis exactly.

GRADGUARD_SOAK_EDITS (default 1500) sets the number of edits, GRADGUARD_SOAK_SEED the seed (default: a
fixed one; the seed used is printed).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from typing import Any

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from fixture_corpus import FIXTURES
from gradguard.api import analyze_source
from gradguard.lsp import convert
from gradguard.text import code_units, split_lines

pytestmark = pytest.mark.asyncio

URI = "file:///virtual/soak.py"
EDITS = int(os.environ.get("GRADGUARD_SOAK_EDITS", "1500"))
SEED = int(os.environ.get("GRADGUARD_SOAK_SEED", "20251121"))
BUDGET_SECONDS = 60

SOURCES = [
    FIXTURES / "GG001" / "pos_prenorm_two_sublayers.py",
    FIXTURES / "GG002" / "pos_clamp_weight_in_forward.py",
    FIXTURES / "GG001" / "neg_clone_then_write.py",
]
UNICODE = 'def schritt(größe):\n    ψ = torch.zeros(größe, requires_grad=True)\n    s = "😀 ψ"; ψ += 1\n    return ψ, s\n'


def corpus_text() -> str:
    return "\n\n".join(p.read_text(encoding="utf-8") for p in SOURCES) + "\n\n" + UNICODE


def position(text: str, offset: int) -> types.Position:
    """LSP position (UTF-16) of a code-point offset; lines split like the server splits them."""
    before = text[:offset]
    lines = split_lines(before)
    return types.Position(line=len(lines) - 1, character=code_units(lines[-1], types.PositionEncodingKind.Utf16))


def safe_offset(text: str, offset: int) -> int:
    """Never split a \\r\\n pair (an editor never puts the cursor between them)."""
    if 0 < offset < len(text) and text[offset - 1] == "\r" and text[offset] == "\n":
        return offset - 1
    return offset


def expected_items(text: str) -> list[tuple]:
    lines = split_lines(text)
    return sorted(key(convert.to_lsp_diagnostic(d, URI, lines, types.PositionEncodingKind.Utf16)) for d in analyze_source(text).diagnostics)


def key(d: types.Diagnostic) -> tuple:
    r = d.range
    return (r.start.line, r.start.character, r.end.line, r.end.character, str(d.code), d.message)


async def last_publish_for(client: LanguageClient, version: int, timeout: float = 30.0) -> Any:
    async def wait() -> Any:
        while True:
            mine = [p for p in client.published if p.uri == URI]  # type: ignore[attr-defined]
            if mine and mine[-1].version == version:
                return mine[-1]
            await asyncio.sleep(0.01)

    return await asyncio.wait_for(wait(), timeout)


async def test_soak_random_edits(client: LanguageClient, capfd):
    rnd = random.Random(SEED)
    corpus = corpus_text()
    text = corpus
    version = 1
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(uri=URI, language_id="python", version=1, text=text))
    )
    await last_publish_for(client, 1)
    started = time.perf_counter()
    requests = 0
    edits = 0
    while edits < EDITS:
        burst = rnd.randint(1, 20)
        for _ in range(min(burst, EDITS - edits)):
            version += 1
            edits += 1
            if edits % 250 == 0 and edits < EDITS:  # back to a text that parses, as one ranged change over everything
                start, end, new = 0, len(text), corpus
            elif rnd.random() < 0.55 or len(text) < 200:
                start = end = safe_offset(text, rnd.randint(0, len(text)))
                a = rnd.randint(0, len(corpus) - 1)
                new = corpus[a : a + rnd.randint(1, 80)]
                if new.startswith("\n") and start > 0 and text[start - 1] == "\r":
                    new = " " + new
            else:
                start = safe_offset(text, rnd.randint(0, len(text)))
                end = safe_offset(text, min(len(text), start + rnd.randint(0, 60 if len(text) < 2 * len(corpus) else 400)))
                new = ""
            rng = types.Range(start=position(text, start), end=position(text, end))
            text = text[:start] + new + text[end:]
            client.text_document_did_change(
                types.DidChangeTextDocumentParams(
                    text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=version),
                    content_changes=[types.TextDocumentContentChangePartial(range=rng, text=new)],
                )
            )
        if rnd.random() < 0.25:  # a request in the middle of the storm must be answered
            requests += 1
            published = [p for p in client.published if p.uri == URI]  # type: ignore[attr-defined]
            diags = list(published[-1].diagnostics) if published else []
            lines = split_lines(text)
            line = rnd.randrange(len(lines))
            await client.text_document_hover_async(
                types.HoverParams(text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line=line, character=0))
            )
            await client.text_document_code_action_async(
                types.CodeActionParams(
                    text_document=types.TextDocumentIdentifier(uri=URI),
                    range=types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line, character=0)),
                    context=types.CodeActionContext(diagnostics=diags[:3]),
                )
            )
        await asyncio.sleep(rnd.choice([0, 0.002, 0.01, 0.03, 0.06]))
    sent_at = time.perf_counter()

    final = await last_publish_for(client, version)
    await asyncio.sleep(0.3)  # nothing may come after it
    mine = [p for p in client.published if p.uri == URI]  # type: ignore[attr-defined]
    assert mine[-1].version == version
    versions = [p.version for p in mine]
    assert versions == sorted(versions), "a publish went back in version"

    final_chars, final_parses = len(text), not any(d.code == "GG900" for d in final.diagnostics)
    got = sorted(key(d) for d in final.diagnostics)
    expected = expected_items(text)
    syntax = [e for e in expected if e[4] == "GG900"]
    if not syntax:
        assert got == expected
    else:
        assert [g for g in got if g[4] == "GG900"] == syntax
        lines = split_lines(text)
        bad_lines = {e[0] for e in syntax}
        for d in final.diagnostics:
            if d.code == "GG900":
                continue
            assert d.range.start.line not in bad_lines
            assert d.range.start.line < len(lines)
            assert d.data["line"] == d.range.start.line + 1 and d.data["version"] == version

    # alive, and exact again once the text parses
    version += 1
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=position(text, 0), end=position(text, len(text))), text=corpus)],
        )
    )
    text = corpus
    recovered = await last_publish_for(client, version)
    assert sorted(key(d) for d in recovered.diagnostics) == expected_items(text)
    elapsed = time.perf_counter() - started
    server_log = capfd.readouterr().err
    assert "Traceback" not in server_log and "failed" not in server_log, server_log[-3000:]
    with capfd.disabled():
        print(
            f"\n[soak] {EDITS} edits (seed {SEED}), {requests} request pairs, {len(mine)} publishes, "
            f"final text {final_chars} chars ({'parses' if final_parses else 'syntax error'}), "
            f"edits sent in {sent_at - started:.1f}s, all done in {elapsed:.1f}s"
        )
    assert elapsed < BUDGET_SECONDS * max(1, EDITS / 1500)


async def test_every_publish_matches_a_fresh_analysis_over_edits_that_parse(client: LanguageClient):
    """Keystrokes and inserted/deleted lines that keep the text valid, one at a time: each publish (served by
    the re-parse of one statement, the function cache and moved findings) equals ``api.analyze_source``."""
    rnd = random.Random(SEED)
    text = "\n\n".join(p.read_text(encoding="utf-8") for p in sorted((FIXTURES / "GG001").glob("pos_*.py"))[:8])
    version = 1
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(uri=URI, language_id="python", version=1, text=text))
    )
    await last_publish_for(client, 1)
    checked = 0
    while checked < 40:
        lines = text.split("\n")
        i = rnd.randrange(1, len(lines) - 1)
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        choice = rnd.random()
        if choice < 0.4:
            new_lines = lines[:i] + [indent + "# " + "x" * rnd.randint(0, 5)] + lines[i:]
        elif choice < 0.6 and lines[i].strip().startswith("#"):
            new_lines = lines[:i] + lines[i + 1:]
        else:
            new_lines = list(lines)
            new_lines[i] = lines[i] + "  # note" if "#" not in lines[i] else lines[i]
        new_text = "\n".join(new_lines)
        try:
            compile(new_text, "soak.py", "exec")
        except SyntaxError:
            continue
        version += 1
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=version),
                content_changes=[types.TextDocumentContentChangePartial(
                    range=types.Range(start=position(text, 0), end=position(text, len(text))), text=new_text)],
            )
        )
        text = new_text
        published = await last_publish_for(client, version)
        assert sorted(key(d) for d in published.diagnostics) == expected_items(text)
        # fixes are built on demand, not published (tests/lsp/test_fix_paths.py compares them, moved findings too)
        fresh = sorted(json.dumps({k: v for k, v in d.to_json().items() if k != "fix"}, sort_keys=True)
                       for d in analyze_source(text, "/virtual/soak.py").diagnostics)
        shown = sorted(json.dumps({k: v for k, v in d.data.items() if k != "version"}, sort_keys=True)
                       for d in published.diagnostics)
        assert shown == fresh  # related lines too
        checked += 1
