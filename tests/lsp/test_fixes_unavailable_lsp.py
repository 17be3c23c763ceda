"""The language server without libcst (``tests/no_libcst`` first on its ``PYTHONPATH``): one warning, the findings
as usual, no fix actions (only "suppress"), and no crash."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
import pytest_lsp
from conftest import SERVER_ENV, _make_default_client
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from test_lsp import rng, wait_publish

pytestmark = pytest.mark.asyncio

TESTS = Path(__file__).parents[1]
FIXTURE = TESTS / "fixtures" / "GG001" / "pos_abs_input_l1_rescale.py"  # has a safe fix
URI = "file:///tmp/nolibcst/train.py"
ENV = {**SERVER_ENV, "PYTHONPATH": os.pathsep.join([str(TESTS / "no_libcst"), str(TESTS.parent / "server"),
                                                     os.environ.get("PYTHONPATH", "")])}


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "gradguard.lsp"],
                                              client_factory=_make_default_client, server_env=ENV))
async def client(lsp_client: LanguageClient, tmp_path):
    caps = client_capabilities("visual-studio-code")
    caps.text_document.diagnostic = None
    await lsp_client.initialize_session(types.InitializeParams(capabilities=caps, root_uri=tmp_path.as_uri()))
    yield
    await lsp_client.shutdown_session()


async def test_server_without_libcst_warns_once_and_offers_no_fix(client: LanguageClient):
    text = FIXTURE.read_text(encoding="utf-8")
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=URI, language_id="python", version=1, text=text)))
    diags = await wait_publish(client, URI, version=1)
    assert [d.code for d in diags] == ["GG001"] and "fix" not in diags[0].data
    # first, before any fix was asked for (the client resolves: a fix-all would be listed without an edit)
    fix_all = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), range=rng(0, 0, 0, 0),
        context=types.CodeActionContext(diagnostics=[], only=["source.fixAll.gradguard"])))
    assert not fix_all
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), range=diags[0].range,
        context=types.CodeActionContext(diagnostics=list(diags))))
    assert [a.title for a in actions] == ["Suppress GG001 on this line"]
    warnings = [m.message for m in client.messages if "fixes are unavailable" in m.message]
    assert warnings == ["gradguard: fixes are unavailable: libcst is not installed (pip install libcst)"]
    assert all(m.type == types.MessageType.Warning for m in client.messages if m.message in warnings)


async def test_the_warning_comes_once_the_first_findings_are_out_without_asking_for_a_fix(client: LanguageClient):
    """libcst is looked for when the fix layer loads (``on_demand.py``), not at start: just after the first
    findings are sent, so the warning comes without a code action or hover."""
    text = FIXTURE.read_text(encoding="utf-8")
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=URI, language_id="python", version=1, text=text)))
    await wait_publish(client, URI, version=1)
    for _ in range(200):
        warnings = [m.message for m in client.messages if "fixes are unavailable" in m.message]
        if warnings:
            break
        await asyncio.sleep(0.05)
    assert warnings == ["gradguard: fixes are unavailable: libcst is not installed (pip install libcst)"]
