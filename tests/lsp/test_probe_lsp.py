"""The runtime probe in the language server (gradguard.lsp.probe_support): a real server subprocess, a
real probe (torch) on a copy of a GG001 fixture.  The probe-running tests each pay one warm-worker
start (``import torch``, ~2-3 s)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from gradguard.lsp.probe_support import DISABLED, UNTRUSTED, ProbeSettings, parse_settings
from lsprotocol import types
from pytest_lsp import LanguageClient

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "GG001" / "pos_abs_input_l1_rescale.py"
ENABLED = {"gradguard": {}, "probe": {"enable": True, "onSave": False, "timeout": 30}, "trusted": True}


def _copy(root: Path) -> tuple[str, str, int]:
    """The fixture copied under the workspace root: (uri, text, 0-based line of its GG001)."""
    target = root / "model.py"
    shutil.copyfile(FIXTURE, target)
    text = target.read_text()
    line = next(i for i, l in enumerate(text.splitlines()) if "# expect: GG001" in l)
    return target.as_uri(), text, line


def _open(client: LanguageClient, uri: str, text: str, version: int = 1) -> None:
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))


async def _wait(client: LanguageClient, uri: str, pred, timeout: float = 20.0) -> list[types.Diagnostic]:
    """The diagnostics of the first publish for ``uri`` (after those already seen) satisfying ``pred``."""

    async def poll() -> list[types.Diagnostic]:
        index = 0
        while True:
            published: list[Any] = client.published  # type: ignore[attr-defined]
            while index < len(published):
                params = published[index]
                index += 1
                if params.uri == uri and pred(list(params.diagnostics)):
                    return list(params.diagnostics)
            await asyncio.sleep(0.01)

    return await asyncio.wait_for(poll(), timeout)


def _gg001(diags: list[types.Diagnostic], line: int) -> list[types.Diagnostic]:
    return [d for d in diags if d.code == "GG001" and d.range.start.line == line]


def _confirmed(line: int):
    return lambda diags: any(isinstance(d.data, dict) and d.data.get("confirmed") is True for d in _gg001(diags, line))


async def _command(client: LanguageClient, *arguments: Any) -> dict[str, Any]:
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="gradguard.probe", arguments=list(arguments)))


async def _lenses(client: LanguageClient, uri: str) -> list[types.CodeLens]:
    return await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))) or []


# ---- settings (no server) -------------------------------------------------------------------
def test_settings_are_off_by_default_and_need_trust():
    assert parse_settings(None)[0].refusal() == DISABLED
    assert parse_settings({"gradguard": {}})[0].refusal() == DISABLED
    assert parse_settings({"probe": {"enable": "yes"}})[0].refusal() == DISABLED  # only a real true
    assert parse_settings({"probe": {"enable": True}, "trusted": False})[0].refusal() == UNTRUSTED
    assert parse_settings({"probe": {"enable": False}, "trusted": True})[0].refusal() == DISABLED
    # a client that says nothing about trust: the explicit setting is what allows it
    assert parse_settings({"probe": {"enable": True}})[0].refusal() is None
    settings, warnings = parse_settings({"probe": {"enable": True, "device": "tpu", "timeout": -1, "entry": 3},
                                         "trusted": "yes"})
    assert settings == ProbeSettings(enable=True, trusted=False)  # bad values: safe defaults, untrusted
    assert len(warnings) == 4


# ---- the server -------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_disabled_by_default_command_refuses_and_nothing_runs(client: LanguageClient, tmp_path: Path):
    uri, text, line = _copy(tmp_path)
    _open(client, uri, text)
    diags = await _wait(client, uri, lambda d: bool(_gg001(d, line)))
    assert all("confirmed" not in d.data for d in _gg001(diags, line))
    result = await _command(client, {"uri": uri, "entry": "run"})
    assert result["status"] == "refused" and result["ran"] is False
    assert "probe is off" in result["message"] and "enable" in result["message"]
    assert await _lenses(client, uri) == []


@pytest.mark.init_options({"gradguard": {}, "probe": {"enable": True}, "trusted": False})
@pytest.mark.asyncio
async def test_untrusted_workspace_refuses_even_when_enabled(client: LanguageClient, tmp_path: Path):
    uri, text, line = _copy(tmp_path)
    _open(client, uri, text)
    await _wait(client, uri, lambda d: bool(_gg001(d, line)))
    result = await _command(client, {"uri": uri, "entry": "run"})
    assert result["status"] == "refused" and result["ran"] is False
    assert "not trusted" in result["message"]
    assert await _lenses(client, uri) == []


@pytest.mark.init_options(ENABLED)
@pytest.mark.asyncio
async def test_enabled_and_trusted_command_confirms_the_finding_on_its_line(client: LanguageClient, tmp_path: Path):
    uri, text, line = _copy(tmp_path)
    _open(client, uri, text)
    before = _gg001(await _wait(client, uri, lambda d: bool(_gg001(d, line))), line)
    assert before and all("confirmed" not in d.data for d in before)

    lenses = await _lenses(client, uri)
    assert len(lenses) == 1 and lenses[0].range.start.line == 0
    assert lenses[0].command.title == "Confirm with probe" and lenses[0].command.command == "gradguard.probe"
    assert list(lenses[0].command.arguments) == [uri]

    result = await _command(client, {"uri": uri, "entry": "run"})
    assert result["status"] == "raised" and result["ran"] is True, result
    assert result["confirmed"] == 1 and result["added"] == 0, result

    diags = await _wait(client, uri, _confirmed(line))
    (confirmed,) = [d for d in _gg001(diags, line) if d.data.get("confirmed")]
    assert confirmed.severity == types.DiagnosticSeverity.Error
    assert "confirmed by the runtime probe on cpu" in confirmed.message
    assert confirmed.source == "gradguard"
    assert confirmed.data["device"] == "cpu" and "modified by an inplace operation" in confirmed.data["torch_message"]

    # an edit makes the result stale: the next publish no longer claims confirmation
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text="# edited\n" + text)]))
    edited = await _wait(client, uri, lambda d: bool(_gg001(d, line + 1)))
    assert all("confirmed" not in d.data for d in _gg001(edited, line + 1))
    # ... and the buffer no longer matches the file on disk: the probe refuses to run a different text
    result = await _command(client, uri)
    assert result["status"] == "unsaved" and result["ran"] is False


@pytest.mark.init_options({**ENABLED, "probe": {"enable": True, "entry": "run", "timeout": 30}})
@pytest.mark.asyncio
async def test_probe_on_save_and_a_result_for_an_older_text_is_dropped(client: LanguageClient, tmp_path: Path):
    uri, text, line = _copy(tmp_path)
    _open(client, uri, text)
    await _wait(client, uri, lambda d: bool(_gg001(d, line)))
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    await _wait(client, uri, _confirmed(line))

    # the command while the document changes under it: its result is dropped, not published
    probing = asyncio.ensure_future(_command(client, uri))
    await asyncio.sleep(0.01)  # the request is out; the probe takes longer
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text + "\n")]))
    result = await asyncio.wait_for(probing, 30)
    assert result["status"] == "stale" and "dropped" in result["message"], result
    await asyncio.sleep(0.3)
    last = [p for p in client.published if p.uri == uri][-1]  # type: ignore[attr-defined]
    assert last.version == 2 and not _confirmed(line)(list(last.diagnostics))


PROBE_ONLY_FIXTURE = (Path(__file__).resolve().parents[1] / "fixtures" / "probe_only" / "GG103"
                      / "pos_data_of_encoder_output_grad_report.py")


@pytest.mark.init_options(ENABLED)
@pytest.mark.asyncio
async def test_a_finding_only_the_probe_made_has_its_fix_as_a_quick_fix(client: LanguageClient, tmp_path: Path):
    """Issue 31 item 3: the fix ``check --probe`` gives a probe-only finding is its quick fix in the editor."""
    target = tmp_path / "train.py"
    shutil.copyfile(PROBE_ONLY_FIXTURE, target)
    uri, text = target.as_uri(), target.read_text()
    _open(client, uri, text)
    await asyncio.sleep(0.5)  # the first publish (no static finding here)
    result = await _command(client, {"uri": uri, "entry": "run"})
    assert result["added"] == 1, result
    diags = await _wait(client, uri, lambda d: any(x.source == "gradguard-probe" for x in d))
    (added,) = [d for d in diags if d.source == "gradguard-probe"]
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=added.range,
        context=types.CodeActionContext(diagnostics=[added], only=[types.CodeActionKind.QuickFix])))
    fixes = [a for a in actions or [] if not a.title.startswith("Suppress ")]
    assert [a.title for a in fixes] == ["Let the gradient through: `h` instead of `h.data`"], [a.title for a in actions or []]
    edits = fixes[0].edit.document_changes[0].edits
    assert len(edits) == 1 and edits[0].new_text == "" and edits[0].range.start.line == added.range.start.line
