"""The language server at the edges of its settings and of the protocol (issue 28, items 8, 12-15, 17): a real
``python -m gradguard.lsp`` and a real client (pytest-lsp), or raw bytes on the server's stdin where no
well-behaved client could send them.  Each test failed before."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

pytestmark = pytest.mark.asyncio

LEAF = "import torch\nx = torch.zeros(3, requires_grad=True)\nx += 1\n"  # GG002 on line 3


def _open(client: LanguageClient, uri: str, text: str, version: int = 1) -> None:
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))


async def _published(client: LanguageClient, uri: str, pred, timeout: float = 20.0) -> list[types.Diagnostic]:
    """The diagnostics of the first publish for ``uri`` from now on satisfying ``pred``."""
    start = len(client.published)  # type: ignore[attr-defined]

    async def poll() -> list[types.Diagnostic]:
        index = start
        while True:
            published: list[Any] = client.published  # type: ignore[attr-defined]
            while index < len(published):
                params = published[index]
                index += 1
                if params.uri == uri and pred(list(params.diagnostics)):
                    return list(params.diagnostics)
            await asyncio.sleep(0.01)

    return await asyncio.wait_for(poll(), timeout)


def _codes(diags: list[types.Diagnostic]) -> list[str]:
    return [str(d.code) for d in diags]


# ---- item 8: "trusted": false sticks ---------------------------------------------------------
@pytest.mark.init_options({"gradguard": {}, "probe": {"enable": True, "onSave": False}, "trusted": False})
async def test_untrusted_stays_untrusted_when_a_later_push_says_nothing_about_trust(client: LanguageClient,
                                                                                   tmp_path: Path):
    target = tmp_path / "model.py"
    target.write_text(LEAF)
    _open(client, target.as_uri(), LEAF)
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"gradguard": {}, "probe": {"enable": True, "onSave": False}}))
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="gradguard.probe", arguments=[{"uri": target.as_uri()}]))
    assert result["status"] == "refused" and result["ran"] is False and "not trusted" in result["message"]
    # an explicit grant lifts it (the editor's workspace trust)
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"gradguard": {}, "probe": {"enable": False}, "trusted": True}))
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="gradguard.probe", arguments=[{"uri": target.as_uri()}]))
    assert "not trusted" not in result["message"] and "probe is off" in result["message"]


# ---- item 17: didChangeConfiguration without a "gradguard" key ------------------------------
async def test_settings_pushed_flat_are_applied(client: LanguageClient, tmp_path: Path):
    uri = (tmp_path / "m.py").as_uri()
    waiting = _published(client, uri, lambda d: "GG002" in _codes(d))
    _open(client, uri, LEAF)
    await waiting
    waiting = _published(client, uri, lambda d: "GG002" not in _codes(d))
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"ignore": ["GG002"]}))
    assert await waiting == []


async def test_settings_pushed_as_null_are_pulled_with_workspace_configuration(client: LanguageClient,
                                                                                tmp_path: Path):
    uri = (tmp_path / "m.py").as_uri()
    waiting = _published(client, uri, lambda d: "GG002" in _codes(d))
    _open(client, uri, LEAF)
    await waiting
    client.set_configuration({"gradguard": {"ignore": ["GG002"]}})
    waiting = _published(client, uri, lambda d: "GG002" not in _codes(d))
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    assert await waiting == []


# ---- item 12: a bad pyproject.toml or .gitignore in workspace mode -------------------------------
@pytest.mark.pull
@pytest.mark.init_options({"gradguard": {}, "diagnosticMode": "workspace"})
async def test_workspace_mode_reports_a_bad_config_and_still_analyses(client: LanguageClient, tmp_path: Path):
    """Before: `tool = "x"` raised inside the handler and a .gitignore line `!` inside the survey: the pull
    was answered with no report at all and nothing said why."""
    (tmp_path / "pyproject.toml").write_text('tool = "x"\n')
    (tmp_path / ".gitignore").write_text("!\nbuild\\\nskipped.py\n")
    (tmp_path / "bug.py").write_text(LEAF)
    (tmp_path / "skipped.py").write_text(LEAF)
    result = await client.workspace_diagnostic_async(types.WorkspaceDiagnosticParams(previous_result_ids=[]))
    reports = {r.uri: r for r in result.items}
    assert sorted(reports) == [(tmp_path / "bug.py").as_uri()]
    assert _codes(reports[(tmp_path / "bug.py").as_uri()].items) == ["GG002"]
    messages = [m.message for m in client.messages]
    assert any("pyproject.toml" in m and "`tool` must be a table" in m for m in messages), messages
