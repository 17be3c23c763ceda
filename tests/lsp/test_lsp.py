"""End-to-end tests of the language server (``python -m gradguard.lsp``) through pytest-lsp."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Sequence

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from gradguard.api import analyze_source

pytestmark = pytest.mark.asyncio

URI = "file:///virtual/sample.py"  # never read from disk
LEAF = "import torch\nx = torch.zeros(3, requires_grad=True)\nx += 1\n"
TWO_FUNCS = """import torch


def f():
    x = torch.zeros(3, requires_grad=True)
    x += 1
    return x


def g():
    y = torch.zeros(3, requires_grad=True)
    y.mul_(2)
    return y
"""


# ---- helpers ----------------------------------------------------------------------------
async def wait_publish(client: LanguageClient, uri: str, version: int | None = None, timeout: float = 10.0) -> Sequence[types.Diagnostic]:
    """Diagnostics of the next not-yet-consumed publish for ``uri`` (at ``version`` if given)."""
    start = getattr(client, "_consumed", 0)

    async def poll() -> Sequence[types.Diagnostic]:
        index = start
        while True:
            published: list[Any] = client.published  # type: ignore[attr-defined]
            while index < len(published):
                params = published[index]
                index += 1
                if params.uri == uri and (version is None or params.version == version):
                    client._consumed = index  # type: ignore[attr-defined]
                    return params.diagnostics
            await asyncio.sleep(0.005)

    return await asyncio.wait_for(poll(), timeout)


def open_doc(client: LanguageClient, text: str, uri: str = URI, version: int = 1) -> None:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)
        )
    )


def change_full(client: LanguageClient, text: str, version: int, uri: str = URI) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


def change_range(client: LanguageClient, rng: types.Range, new_text: str, version: int, uri: str = URI) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(range=rng, text=new_text)],
        )
    )


def rng(l1: int, c1: int, l2: int, c2: int) -> types.Range:
    return types.Range(start=types.Position(line=l1, character=c1), end=types.Position(line=l2, character=c2))


def utf16_len(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def apply_edits(text: str, edits: Sequence[types.TextEdit]) -> str:
    """Apply LSP TextEdits (UTF-16 positions) to ``text``."""
    lines = text.split("\n")

    def offset(pos: types.Position) -> int:
        before = sum(len(l) + 1 for l in lines[: pos.line])
        line, units, cp = lines[pos.line], 0, 0
        while cp < len(line) and units < pos.character:
            units += utf16_len(line[cp])
            cp += 1
        return before + cp

    for e in sorted(edits, key=lambda e: offset(e.range.start), reverse=True):
        text = text[: offset(e.range.start)] + e.new_text + text[offset(e.range.end) :]
    return text


def summary(diags: Sequence[types.Diagnostic]) -> list[tuple[int, str]]:
    return sorted((d.range.start.line, str(d.code)) for d in diags)


# ---- tests ------------------------------------------------------------------------------
async def test_capabilities(client: LanguageClient):
    caps = client.init_result.capabilities  # type: ignore[attr-defined]
    assert client.init_result.server_info.name == "gradguard"  # type: ignore[attr-defined]
    assert caps.position_encoding == types.PositionEncodingKind.Utf16
    sync = caps.text_document_sync
    assert sync.change == types.TextDocumentSyncKind.Incremental
    assert caps.diagnostic_provider is not None and caps.hover_provider and caps.code_action_provider


async def test_open_publishes_finding(client: LanguageClient):
    open_doc(client, LEAF)
    diags = await wait_publish(client, URI, version=1)
    assert len(diags) == 1
    d = diags[0]
    assert (d.code, d.source, d.severity) == ("GG002", "gradguard", types.DiagnosticSeverity.Error)
    assert d.range == rng(2, 0, 2, 6)
    assert "leaf" in d.message
    assert d.code_description.href.endswith("/GG002.md")
    assert len(d.related_information) == 1
    rel = d.related_information[0]
    assert rel.location.uri == URI and rel.location.range.start == types.Position(line=1, character=4)
    assert d.data["code"] == "GG002" and d.data["line"] == 3 and d.data["fix"] is None


async def test_incremental_change_clears(client: LanguageClient):
    open_doc(client, LEAF)
    assert len(await wait_publish(client, URI, version=1)) == 1
    change_range(client, rng(2, 0, 2, 6), "y = x + 1", version=2)
    assert len(await wait_publish(client, URI, version=2)) == 0
    # and back: an incremental edit that reintroduces the bug
    change_range(client, rng(2, 0, 2, 9), "x.add_(1)", version=3)
    assert summary(await wait_publish(client, URI, version=3)) == [(2, "GG002")]


async def test_syntax_error_keeps_unaffected_findings(client: LanguageClient):
    open_doc(client, TWO_FUNCS)
    assert summary(await wait_publish(client, URI, version=1)) == [(5, "GG002"), (11, "GG002")]
    # break g's return line: `return y` -> `return y +`
    change_range(client, rng(12, 12, 12, 12), " +", version=2)
    broken = apply_edits(TWO_FUNCS, [types.TextEdit(range=rng(12, 12, 12, 12), new_text=" +")])
    err = analyze_source(broken).diagnostics[0]
    assert err.code == "GG900"
    diags = await wait_publish(client, URI, version=2)
    assert (5, "GG002") in summary(diags)  # f is untouched: its finding stays
    assert (err.line - 1, "GG900") in summary(diags)
    assert all(d.range.start.line != err.line - 1 for d in diags if d.code != "GG900")
    gg900 = next(d for d in diags if d.code == "GG900")
    assert gg900.severity == types.DiagnosticSeverity.Error and gg900.code_description is None
    # fixing the syntax error goes back to a normal run
    change_range(client, rng(12, 12, 12, 14), "", version=3)
    assert summary(await wait_publish(client, URI, version=3)) == [(5, "GG002"), (11, "GG002")]


async def code_actions(client: LanguageClient, diags: Sequence[types.Diagnostic]) -> list[types.CodeAction]:
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=URI),
            range=diags[0].range,
            context=types.CodeActionContext(diagnostics=list(diags), only=[types.CodeActionKind.QuickFix]),
        )
    )
    return [a for a in result or [] if isinstance(a, types.CodeAction)]


async def test_suppress_code_action(client: LanguageClient):
    open_doc(client, LEAF)
    diags = await wait_publish(client, URI, version=1)
    actions = await code_actions(client, diags)
    assert [a.title for a in actions] == ["Suppress GG002 on this line"]
    action = actions[0]
    assert action.kind == types.CodeActionKind.QuickFix
    (doc_edit,) = action.edit.document_changes
    assert doc_edit.text_document.uri == URI and doc_edit.text_document.version == 1
    new_text = apply_edits(LEAF, doc_edit.edits)
    assert new_text.splitlines()[2] == "x += 1  # gradguard: ignore[GG002]"
    assert analyze_source(new_text).diagnostics == []
    change_full(client, new_text, version=2)
    assert len(await wait_publish(client, URI, version=2)) == 0


async def test_suppress_adds_to_existing_comment(client: LanguageClient):
    text = LEAF.replace("x += 1", "x += 1  # gradguard: ignore[GG001]")
    open_doc(client, text)
    diags = await wait_publish(client, URI, version=1)
    (action,) = await code_actions(client, diags)
    new_text = apply_edits(text, action.edit.document_changes[0].edits)
    assert new_text.splitlines()[2] == "x += 1  # gradguard: ignore[GG001, GG002]"
    assert analyze_source(new_text).diagnostics == []


async def test_hover(client: LanguageClient):
    open_doc(client, LEAF)
    diags = await wait_publish(client, URI, version=1)
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line=2, character=2))
    )
    assert hover is not None and hover.contents.kind == types.MarkupKind.Markdown
    assert diags[0].message in hover.contents.value
    assert diags[0].code_description.href in hover.contents.value
    assert "GG002" in hover.contents.value
    nothing = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line=0, character=2))
    )
    assert nothing is None


async def test_pull_diagnostics(client: LanguageClient):
    open_doc(client, LEAF)
    await wait_publish(client, URI, version=1)
    report = await client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=URI))
    )
    assert report.kind == "full"
    assert summary(report.items) == [(2, "GG002")]
    assert report.items[0].source == "gradguard"


@pytest.mark.init_options({"ignore": ["GG002"]})
async def test_init_options_ignore(client: LanguageClient):
    open_doc(client, LEAF)
    assert len(await wait_publish(client, URI, version=1)) == 0


@pytest.mark.init_options({"severity": {"GG002": "info"}})
async def test_init_options_severity(client: LanguageClient):
    open_doc(client, LEAF)
    (d,) = await wait_publish(client, URI, version=1)
    assert d.severity == types.DiagnosticSeverity.Information


@pytest.mark.init_options({"bogus": 1})
async def test_bad_config_warns_and_serves_defaults(client: LanguageClient):
    open_doc(client, LEAF)
    assert summary(await wait_publish(client, URI, version=1)) == [(2, "GG002")]
    assert any(m.type == types.MessageType.Warning and "bogus" in m.message for m in client.messages)


async def test_did_change_configuration(client: LanguageClient):
    open_doc(client, LEAF)
    assert len(await wait_publish(client, URI, version=1)) == 1
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"gradguard": {"ignore": ["GG0"]}}))
    assert len(await wait_publish(client, URI, version=1)) == 0
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"gradguard": {}}))
    assert len(await wait_publish(client, URI, version=1)) == 1


async def test_did_close_clears(client: LanguageClient):
    open_doc(client, LEAF)
    assert len(await wait_publish(client, URI, version=1)) == 1
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=URI)))
    assert len(await wait_publish(client, URI)) == 0
    assert len(client.diagnostics[URI]) == 0


ASTRAL_LINE = 'ψ = 1; x = torch.zeros(3, requires_grad=True); s = "😀"; x += 1'


def _units(s: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(s.encode("utf-8"))
    if encoding == "utf-32":
        return len(s)
    return utf16_len(s)


@pytest.mark.parametrize(
    "encoding",
    [
        "utf-16",
        pytest.param("utf-8", marks=pytest.mark.encodings(["utf-8", "utf-16"])),
        pytest.param("utf-32", marks=pytest.mark.encodings(["utf-32"])),
    ],
)
async def test_position_encodings(client: LanguageClient, encoding: str):
    assert client.init_result.capabilities.position_encoding == encoding  # type: ignore[attr-defined]
    open_doc(client, "import torch\n" + ASTRAL_LINE + "\n")
    (d,) = await wait_publish(client, URI, version=1)
    start = ASTRAL_LINE.index("x += 1")
    assert d.range.start == types.Position(line=1, character=_units(ASTRAL_LINE[:start], encoding))
    assert d.range.end == types.Position(line=1, character=_units(ASTRAL_LINE[: start + len("x += 1")], encoding))
    if encoding == "utf-16":
        assert d.range.start.character == start + 1  # the emoji is a surrogate pair
    rel = d.related_information[0].location.range.start
    assert rel.character == _units(ASTRAL_LINE[: ASTRAL_LINE.index("torch.zeros")], encoding)


async def test_burst_of_edits_publishes_latest_only(client: LanguageClient):
    open_doc(client, LEAF)
    await wait_publish(client, URI, version=1)
    for version in range(2, 12):
        text = LEAF if version % 2 else LEAF.replace("x += 1", "y = x + 1")
        change_full(client, text, version=version)
    assert summary(await wait_publish(client, URI, version=11)) == [(2, "GG002")]
    versions = [p.version for p in client.published if p.uri == URI]  # type: ignore[attr-defined]
    assert versions == sorted(versions)
    assert len(versions) < 11  # the burst was coalesced


async def test_server_survives_bad_requests(client: LanguageClient):
    other = "file:///virtual/never_opened.py"
    assert await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=other), position=types.Position(line=0, character=0))
    ) is None
    bogus = types.Diagnostic(range=rng(99, 0, 99, 1), message="m", source="gradguard", code="GG002", data={"code": "GG002"})
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=other),
            range=bogus.range,
            context=types.CodeActionContext(diagnostics=[bogus]),
        )
    )
    assert not actions
    open_doc(client, LEAF)
    assert summary(await wait_publish(client, URI, version=1)) == [(2, "GG002")]


async def test_latency_large_file(client: LanguageClient, capsys):
    body = "".join(
        f"def f{i}(a):\n    x = torch.zeros(3, requires_grad=True)\n    y = a.exp()\n    z = y * 2\n"
        f"    w = z.sum()\n    x += 1\n    return w\n\n"
        for i in range(375)
    )
    text = "import torch\n\n" + body
    assert text.count("\n") >= 3000
    open_doc(client, text)
    assert len(await wait_publish(client, URI, version=1)) == 375
    timings = []
    for version in range(2, 8):
        t0 = time.perf_counter()
        if version % 2 == 0:  # insert a comment line, then delete it again
            change_range(client, rng(2, 0, 2, 0), "# edit\n", version=version)
        else:
            change_range(client, rng(2, 0, 3, 0), "", version=version)
        assert len(await wait_publish(client, URI, version=version)) == 375
        timings.append(time.perf_counter() - t0)
    with capsys.disabled():
        print(f"\n[latency] didChange -> publishDiagnostics, {text.count(chr(10))} lines (debounce 20 ms): "
              + ", ".join(f"{t * 1000:.0f} ms" for t in timings))
