"""End-to-end tests of the language server (``python -m gradguard.lsp``) through pytest-lsp."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Sequence

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from gradguard.api import analyze_source
from gradguard.doc_links import SHIPPED_DOCS

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
    assert d.code_description.href == (SHIPPED_DOCS / "GG002.md").as_uri()  # the page shipped with gradguard
    assert len(d.related_information) == 1
    rel = d.related_information[0]
    assert rel.location.uri == URI and rel.location.range.start == types.Position(line=1, character=4)
    assert d.data["code"] == "GG002" and d.data["line"] == 3 and d.data["version"] == 1
    assert "fix" not in d.data  # built when a code action or hover asks for it, not before publishing


async def test_incremental_change_clears(client: LanguageClient):
    open_doc(client, LEAF)
    assert len(await wait_publish(client, URI, version=1)) == 1
    change_range(client, rng(2, 0, 2, 6), "y = x + 1", version=2)
    assert len(await wait_publish(client, URI, version=2)) == 0
    # and back: an incremental edit that reintroduces the bug
    change_range(client, rng(2, 0, 2, 9), "x.add_(1)", version=3)
    assert summary(await wait_publish(client, URI, version=3)) == [(2, "GG002")]


WITH_BODY = """import torch

scale = 2.0
with torch.no_grad():
    w = torch.zeros(3, requires_grad=True)


def f():
    w.mul_(scale)
    return w
"""


async def test_an_edit_of_a_module_variable_bound_in_a_block_reaches_the_cached_functions_reading_it(
        client: LanguageClient):
    """``f``'s finding comes from the ``w`` a ``with`` body binds: editing that line (no leaf that requires grad
    any more, then one again) changes what is published, as a fresh analysis says, though ``f`` is unchanged."""
    open_doc(client, WITH_BODY)
    assert summary(await wait_publish(client, URI, version=1)) == [(8, "GG002")]
    text = WITH_BODY
    for version, (old, new) in enumerate(((", requires_grad=True", ""), ("zeros(3)", "zeros(3, requires_grad=True)")), 2):
        column = text.split("\n")[4].index(old)
        change_range(client, rng(4, column, 4, column + len(old)), new, version=version)
        text = text.replace(old, new, 1)
        fresh = [(d.line - 1, d.code) for d in analyze_source(text).diagnostics]
        assert summary(await wait_publish(client, URI, version=version)) == fresh == ([] if version == 2 else [(8, "GG002")])


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


def suppressions(actions: list[types.CodeAction]) -> list[types.CodeAction]:
    return [a for a in actions if a.title.startswith("Suppress ")]


async def test_suppress_code_action(client: LanguageClient):
    open_doc(client, LEAF)
    diags = await wait_publish(client, URI, version=1)
    actions = await code_actions(client, diags)
    fix = analyze_source(LEAF).diagnostics[0].fix
    # the rule's own fix (when it has one) comes first, then the suppression
    assert [a.title for a in actions] == ([fix.title] if fix else []) + ["Suppress GG002 on this line"]
    if fix:
        assert actions[0].is_preferred is fix.safe and actions[0].kind == types.CodeActionKind.QuickFix
    (action,) = suppressions(actions)
    assert not action.is_preferred
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
    (action,) = suppressions(await code_actions(client, diags))
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
    assert diags[0].message not in hover.contents.value  # the editor shows it already (test_hover_lsp.py)
    assert diags[0].code_description.href in hover.contents.value
    assert "GG002" in hover.contents.value
    nothing = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line=0, character=2))
    )
    assert nothing is None


@pytest.mark.hover_formats([types.MarkupKind.PlainText])
async def test_hover_is_plain_text_for_a_client_without_markdown(client: LanguageClient):
    """eglot without markdown-mode announces only plaintext: no ``**`` or backticks reach the user."""
    open_doc(client, LEAF)
    diags = await wait_publish(client, URI, version=1)
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line=2, character=2))
    )
    assert hover is not None and hover.contents.kind == types.MarkupKind.PlainText
    text = hover.contents.value
    assert "`" not in text and "**" not in text and "](" not in text
    assert text.startswith("gradguard GG002 (leaf-mutated): ")
    assert diags[0].message.replace("`", "") not in text
    assert f"GG002 documentation: {diags[0].code_description.href}" in text


@pytest.mark.init_options({"gradguard": {"docs-url": "https://docs.example.org/gradguard/rules/"}})
async def test_docs_url_setting_moves_every_link(client: LanguageClient):
    open_doc(client, LEAF)
    (d,) = await wait_publish(client, URI, version=1)
    assert d.code_description.href == "https://docs.example.org/gradguard/rules/GG002.md"
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line=2, character=2))
    )
    assert "(https://docs.example.org/gradguard/rules/GG002.md)" in hover.contents.value


async def test_every_published_link_opens(client: LanguageClient):
    """Each rule's ``codeDescription.href`` is a page on disk (no made-up web address); GG900 has none."""
    from fixture_corpus import all_fixtures

    seen: set[str] = set()
    for i, fx in enumerate(f for f in all_fixtures() if f.path.name.startswith("pos")):
        code = fx.path.parent.name
        if code in seen:
            continue
        uri = f"file:///virtual/links_{i}.py"
        open_doc(client, fx.path.read_text(encoding="utf-8"), uri=uri)
        for d in await wait_publish(client, uri, version=1):
            seen.add(str(d.code))
            href = d.code_description.href if d.code_description else None
            if d.code == "GG900":
                assert href is None
            else:
                assert href == (SHIPPED_DOCS / f"{d.code}.md").as_uri() and (SHIPPED_DOCS / f"{d.code}.md").is_file()
    assert {"GG001", "GG002", "GG101"} <= seen


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


# ---- pull mode: a client that pulls gets no pushes -------------------------------------
async def pull(client: LanguageClient, previous: str | None = None, uri: str = URI) -> Any:
    return await client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri), previous_result_id=previous)
    )


@pytest.mark.pull
async def test_pull_mode_never_pushes(client: LanguageClient):
    open_doc(client, LEAF)
    report = await pull(client)
    assert report.kind == "full" and summary(report.items) == [(2, "GG002")]
    assert report.items[0].data["version"] == 1
    # unchanged text and configuration: the client may keep what it has
    again = await pull(client, previous=report.result_id)
    assert again.kind == "unchanged" and again.result_id == report.result_id
    change_range(client, rng(2, 0, 2, 6), "y = x + 1", version=2)
    fresh = await pull(client, previous=report.result_id)
    assert fresh.kind == "full" and len(fresh.items) == 0 and fresh.result_id != report.result_id
    # hover reads what was pulled last
    change_range(client, rng(2, 0, 2, 9), "x.add_(1)", version=3)
    assert summary((await pull(client)).items) == [(2, "GG002")]
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line=2, character=1))
    )
    assert hover is not None and "GG002" in hover.contents.value
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=URI)))
    await asyncio.sleep(0.3)
    assert client.published == []  # type: ignore[attr-defined]


@pytest.mark.pull
async def test_pull_mode_config_change_asks_for_a_refresh(client: LanguageClient):
    open_doc(client, LEAF)
    first = await pull(client)
    assert len(first.items) == 1
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"gradguard": {"ignore": ["GG002"]}}))
    await asyncio.wait_for(_until(lambda: client.diagnostic_refresh_count == 1), 10)
    refreshed = await pull(client, previous=first.result_id)  # same text, new configuration: not "unchanged"
    assert refreshed.kind == "full" and len(refreshed.items) == 0


async def _until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.01)


# ---- pyproject.toml is watched ---------------------------------------------------------
async def test_no_watcher_without_dynamic_registration(client: LanguageClient):
    open_doc(client, LEAF)
    await wait_publish(client, URI, version=1)
    assert client.registrations == []  # type: ignore[attr-defined]


@pytest.mark.watch
async def test_pyproject_change_reloads_config(client: LanguageClient, tmp_path):
    await asyncio.wait_for(_until(lambda: client.registrations), 10)  # type: ignore[attr-defined]
    (reg,) = client.registrations  # type: ignore[attr-defined]
    assert reg.method == "workspace/didChangeWatchedFiles"
    assert [w["globPattern"] for w in reg.register_options["watchers"]] == ["**/pyproject.toml"]

    pyproject = tmp_path / "pyproject.toml"
    uri = tmp_path.joinpath("src", "model.py").as_uri()
    open_doc(client, LEAF, uri=uri)
    (d,) = await wait_publish(client, uri, version=1)
    assert d.severity == types.DiagnosticSeverity.Error

    def changed(kind: types.FileChangeType) -> None:
        client.workspace_did_change_watched_files(
            types.DidChangeWatchedFilesParams(changes=[types.FileEvent(uri=pyproject.as_uri(), type=kind)])
        )

    pyproject.write_text('[tool.gradguard.severity]\nGG002 = "info"\n', encoding="utf-8")
    changed(types.FileChangeType.Created)
    (d,) = await wait_publish(client, uri, version=1)
    assert d.severity == types.DiagnosticSeverity.Information

    pyproject.write_text('[tool.gradguard]\nignore = ["GG002"]\n', encoding="utf-8")
    changed(types.FileChangeType.Changed)
    assert len(await wait_publish(client, uri, version=1)) == 0

    # other watched files are no reason to re-analyse
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(changes=[types.FileEvent(uri=tmp_path.joinpath("setup.cfg").as_uri(), type=types.FileChangeType.Changed)])
    )
    pyproject.write_text("[tool.gradguard\n", encoding="utf-8")  # broken: warn, use defaults
    changed(types.FileChangeType.Changed)
    (d,) = await wait_publish(client, uri, version=1)
    assert d.severity == types.DiagnosticSeverity.Error
    assert any("pyproject" in m.message for m in client.messages)

    pyproject.unlink()
    changed(types.FileChangeType.Deleted)
    assert len(await wait_publish(client, uri, version=1)) == 1
    assert len([p for p in client.published if p.uri == uri]) == 5  # type: ignore[attr-defined]


async def test_pyproject_edit_reloads_without_a_file_watcher(client: LanguageClient, tmp_path):
    """Neovim on Linux cannot watch files for the server: an edited pyproject.toml is seen at the next
    change or save of any document, and every open document is analysed again."""
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "demo"\n', encoding="utf-8")
    uri, other = (tmp_path.joinpath("src", name).as_uri() for name in ("model.py", "other.py"))
    def of_other() -> list[Any]:
        return [p for p in client.published if p.uri == other]  # type: ignore[attr-defined]

    open_doc(client, LEAF, uri=other)
    await asyncio.wait_for(_until(lambda: len(of_other()) == 1), 10)
    open_doc(client, LEAF, uri=uri)
    (d,) = await wait_publish(client, uri, version=1)
    assert d.severity == types.DiagnosticSeverity.Error

    pyproject.write_text('[project]\nname = "demo"\n[tool.gradguard]\nignore = ["GG002"]\n', encoding="utf-8")
    change_full(client, LEAF + "\n", version=2, uri=uri)
    assert len(await wait_publish(client, uri, version=2)) == 0
    await asyncio.wait_for(_until(lambda: len(of_other()) == 2), 10)
    assert len(of_other()[-1].diagnostics) == 0  # not edited, analysed again

    pyproject.write_text('[tool.gradguard.severity]\nGG002 = "info"\n', encoding="utf-8")
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    (d,) = await wait_publish(client, uri, version=2)
    assert d.severity == types.DiagnosticSeverity.Information
    assert client.registrations == []  # type: ignore[attr-defined]


# ---- fix-all ---------------------------------------------------------------------------
def _fixable_fixture() -> tuple[str, list[Any]] | None:
    """Text of a corpus fixture with at least one safe fix, if any rule offers fixes yet."""
    from fixture_corpus import all_fixtures

    for fx in all_fixtures():
        text = fx.path.read_text(encoding="utf-8")
        diags = analyze_source(text).diagnostics
        if any(d.fix is not None and d.fix.safe for d in diags):
            return text, diags
    return None


async def test_fix_all_is_advertised_and_empty_without_fixes(client: LanguageClient):
    caps = client.init_result.capabilities  # type: ignore[attr-defined]
    assert "source.fixAll.gradguard" in caps.code_action_provider.code_action_kinds
    assert "quickfix" in caps.code_action_provider.code_action_kinds
    assert "gradguard.applyAllFixes" in caps.execute_command_provider.commands
    open_doc(client, "import torch\nx = torch.zeros(3)\nx += 1\n")  # nothing to fix
    assert len(await wait_publish(client, URI, version=1)) == 0
    for only in (["source.fixAll"], ["source"], ["source.fixAll.gradguard"], None):
        actions = await client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=URI),
                range=rng(0, 0, 0, 0),
                context=types.CodeActionContext(diagnostics=[], only=only),
            )
        )
        assert not actions
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="gradguard.applyAllFixes", arguments=[URI])
    )
    assert result == {"applied": False, "fixes": 0, "skipped": 0}
    assert client.applied_edits == []  # type: ignore[attr-defined]
    bad = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="gradguard.applyAllFixes", arguments=["file:///not/open.py"])
    )
    assert bad["applied"] is False


async def test_quickfix_request_never_gets_the_fix_all(client: LanguageClient):
    open_doc(client, TWO_FUNCS)
    diags = await wait_publish(client, URI, version=1)
    actions = await code_actions(client, diags)
    assert actions and all(a.kind == types.CodeActionKind.QuickFix for a in actions)
    assert len(suppressions(actions)) == 2


async def test_fix_all_applies_every_safe_fix(client: LanguageClient):
    found = _fixable_fixture()
    if found is None:
        pytest.skip("no rule offers an automatic fix yet (tests/lsp/test_fixes.py covers the merging)")
    from gradguard.autofix.writer import fix_text

    text, diags = found
    expected = fix_text(text, "t.py")  # what `gradguard check --fix` makes of it: the same planner
    open_doc(client, text)
    await wait_publish(client, URI, version=1)
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=URI),
            range=rng(0, 0, 0, 0),
            context=types.CodeActionContext(diagnostics=[], only=["source.fixAll"]),
        )
    )
    (action,) = actions
    assert action.kind == "source.fixAll.gradguard"
    (doc_edit,) = action.edit.document_changes
    assert doc_edit.text_document.version == 1
    fixed = apply_edits(text, doc_edit.edits)
    assert fixed == expected.fixed
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="gradguard.applyAllFixes", arguments=[{"uri": URI}])
    )
    assert result["applied"] is True and result["fixes"] == expected.applied
    (sent,) = client.applied_edits  # type: ignore[attr-defined]
    assert apply_edits(text, sent.edit.document_changes[0].edits) == fixed
    change_full(client, fixed, version=2)
    assert summary(await wait_publish(client, URI, version=2)) == sorted((d.line - 1, d.code) for d in analyze_source(fixed).diagnostics)
    assert len(analyze_source(fixed).diagnostics) < len(diags)


# ---- kept findings follow the edits; stale diagnostics get no actions -------------------
async def test_kept_findings_move_with_lines_inserted_above(client: LanguageClient):
    open_doc(client, TWO_FUNCS)
    assert summary(await wait_publish(client, URI, version=1)) == [(5, "GG002"), (11, "GG002")]
    # one didChange: two comment lines at the top, then break g's return (now line 14)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(range=rng(0, 0, 0, 0), text="# a\n# b\n"),
                types.TextDocumentContentChangePartial(range=rng(14, 12, 14, 12), text=" +"),
            ],
        )
    )
    diags = await wait_publish(client, URI, version=2)
    kept = [d for d in diags if d.code != "GG900"]
    assert summary(kept) == [(7, "GG002"), (13, "GG002")]
    assert kept[0].data["line"] == 8 and kept[0].data["version"] == 2
    assert kept[0].related_information[0].location.range.start.line == 6
    # the kept finding's suppression lands on the right line
    (action,) = suppressions(await code_actions(client, [kept[0]]))
    new_text = apply_edits(TWO_FUNCS.replace("import torch", "# a\n# b\nimport torch").replace("return y", "return y +"), action.edit.document_changes[0].edits)
    assert new_text.split("\n")[7] == "    x += 1  # gradguard: ignore[GG002]"


async def test_stale_diagnostics_get_no_code_actions(client: LanguageClient):
    open_doc(client, LEAF)
    old = await wait_publish(client, URI, version=1)
    change_range(client, rng(0, 0, 0, 0), "# moved down\n", version=2)
    fresh = await wait_publish(client, URI, version=2)
    assert await code_actions(client, old) == []
    actions = await code_actions(client, fresh)
    assert actions and all(a.edit.document_changes[0].text_document.version == 2 for a in actions)


@pytest.mark.init_options({"gradguard": {}, "run": "onSave"})
async def test_run_on_save_analyses_on_open_and_save_only(client: LanguageClient):
    open_doc(client, LEAF)
    assert len(await wait_publish(client, URI, version=1)) == 1
    change_range(client, rng(2, 0, 2, 6), "y = x + 1", version=2)
    await asyncio.sleep(0.3)
    assert [p.version for p in client.published] == [1]  # type: ignore[attr-defined]
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=URI)))
    assert len(await wait_publish(client, URI, version=2)) == 0
    # and back to on-type through the settings
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"gradguard": {}, "run": "onType"}))
    await wait_publish(client, URI, version=2)
    change_range(client, rng(2, 0, 2, 9), "x.add_(1)", version=3)
    assert summary(await wait_publish(client, URI, version=3)) == [(2, "GG002")]


async def test_code_actions_for_a_client_that_drops_data(client: LanguageClient):
    open_doc(client, LEAF)
    (d,) = await wait_publish(client, URI, version=1)
    bare = types.Diagnostic(range=d.range, message=d.message, severity=d.severity, code=d.code, source=d.source)
    actions = await code_actions(client, [bare])
    (action,) = suppressions(actions)
    assert action.edit.document_changes[0].text_document.version == 1
    assert apply_edits(LEAF, action.edit.document_changes[0].edits).splitlines()[2] == "x += 1  # gradguard: ignore[GG002]"


async def test_not_analysed_expression_is_a_diagnostic(client: LanguageClient):
    """A sum of 500 terms is too deep to analyse: GG903 on it, and the GG001 above it still shows; an edit
    inside it (parsed again on its own) keeps the GG903, shortening it clears it."""
    head = "import torch\nw = torch.randn(3, requires_grad=True)\ny = torch.exp(w)\ny.add_(1)\ny.sum().backward()\n"
    long = "z = " + " + ".join(["y"] * 500)
    open_doc(client, head + long + "\n")
    diags = await wait_publish(client, URI)
    assert summary(diags) == [(3, "GG001"), (5, "GG903")]
    deep = next(d for d in diags if d.code == "GG903")
    assert deep.severity == types.DiagnosticSeverity.Error and "nested 500 levels deep" in deep.message
    change_range(client, rng(5, len(long), 5, len(long)), " + y", 2)
    assert summary(await wait_publish(client, URI, version=2)) == [(3, "GG001"), (5, "GG903")]
    change_range(client, rng(5, 0, 5, len(long) + 4), "z = y + y", 3)
    assert summary(await wait_publish(client, URI, version=3)) == [(3, "GG001")]
