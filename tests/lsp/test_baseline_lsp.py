"""The language server honours ``baseline = "FILE"`` of ``[tool.gradguard]``: a document's recorded finding is
not published, a new one is; a bad baseline file is a warning."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient
from test_baseline import TRAIN, TWICE
from test_lsp import open_doc, wait_publish

from gradguard.cli import main

pytestmark = pytest.mark.asyncio


async def test_baselined_finding_is_not_published(client: LanguageClient, tmp_path, monkeypatch):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(TRAIN)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRADGUARD_NO_CACHE", "1")
    assert main(["check", "--write-baseline", "gg-baseline.json", "-q", "src"]) == 0
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'demo'\n[tool.gradguard]\nbaseline = 'gg-baseline.json'\n")

    uri = (tmp_path / "src" / "train.py").as_uri()
    open_doc(client, "# edited above\n" + TWICE, uri=uri)  # the recorded finding moved down a line; a new one
    (d,) = await wait_publish(client, uri, version=1)
    assert (d.code, d.range.start.line) == ("GG001", 16)  # step2's, 0-based line 16 = line 17 of the text

    other = (tmp_path / "src" / "other.py").as_uri()  # the same text in another file was not recorded
    open_doc(client, TRAIN, uri=other)
    assert [d.code for d in await wait_publish(client, other, version=1)] == ["GG001"]


async def test_bad_baseline_file_is_a_warning(client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.gradguard]\nbaseline = 'missing.json'\n")
    uri = (tmp_path / "train.py").as_uri()
    open_doc(client, TRAIN, uri=uri)
    assert [d.code for d in await wait_publish(client, uri, version=1)] == ["GG001"]

    async def warned() -> None:
        while not any("baseline file not found" in m.message for m in client.messages):
            await asyncio.sleep(0.01)

    await asyncio.wait_for(warned(), 10)
    (message,) = [m for m in client.messages if "baseline" in m.message]
    assert message.type == types.MessageType.Warning and "\n" not in message.message
