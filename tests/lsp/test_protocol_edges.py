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


# ---- item 13: a document too large to analyse ---------------------------------------------------
def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def test_a_document_over_the_size_cap_gets_one_warning_and_is_not_analysed(client: LanguageClient,
                                                                                   tmp_path: Path):
    """Before: an 8 MB document was analysed on every keystroke (1.1 GB, 11 s each)."""
    uri = (tmp_path / "huge.py").as_uri()
    huge = LEAF + "y = x * 2\n" * 800_000  # 8 MB
    started = time.monotonic()
    waiting = _published(client, uri, lambda d: True, timeout=60)
    _open(client, uri, huge)
    [diag] = await waiting
    assert time.monotonic() - started < 10
    assert diag.code == "GG901" and "too large to analyse" in diag.message and "8.0 MB" in diag.message
    assert diag.severity == types.DiagnosticSeverity.Warning
    pid = client._server.pid  # type: ignore[attr-defined]
    assert _rss_mb(pid) < 400, f"{_rss_mb(pid):.0f} MB"
    # cut down to a normal size, it is analysed again
    waiting = _published(client, uri, lambda d: "GG002" in _codes(d))
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=LEAF)]))
    await waiting
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))


# ---- items 14, 15: raw bytes on the server's stdin ------------------------------------------------
class RawServer:
    """``python -m gradguard.lsp`` spoken to byte by byte: what no well-behaved client sends."""

    def __init__(self) -> None:
        import queue
        import threading

        self.proc = subprocess.Popen([sys.executable, "-m", "gradguard.lsp"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.replies: queue.Queue = queue.Queue()
        self.seen: dict[Any, dict] = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                if line == b"\r\n" and length is not None:
                    break
            self.replies.put(json.loads(out.read(length)))

    def raw(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict, lie: int = 0) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.raw(b"Content-Length: %d\r\n\r\n" % (len(body) + lie) + body)

    def request(self, msg_id: int, method: str, params: Any = None, lie: int = 0) -> None:
        self.send({"id": msg_id, "method": method, "params": params}, lie)

    def reply(self, msg_id: Any, timeout: float = 15.0) -> dict:
        import queue

        deadline = time.monotonic() + timeout
        while msg_id not in self.seen:
            try:
                message = self.replies.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no answer to request {msg_id}") from None
            if "id" in message and "method" not in message:
                self.seen[message["id"]] = message
        return self.seen[msg_id]

    def initialize(self, root: Path) -> None:
        self.request(1, "initialize", {"processId": None, "rootUri": root.as_uri(), "capabilities": {}})
        assert "result" in self.reply(1)
        self.send({"method": "initialized", "params": {}})

    def exit_code(self, timeout: float = 15.0) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def raw():
    server = RawServer()
    yield server
    server.close()


def _hover(uri: str, line: int = 0, character: int = 0) -> dict:
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}


async def test_a_request_before_initialize_gets_server_not_initialized(raw, tmp_path):
    """Before: answered with an empty result, as if the server were ready."""
    raw.request(5, "textDocument/hover", _hover((tmp_path / "m.py").as_uri()))
    assert raw.reply(5)["error"]["code"] == -32002
    raw.initialize(tmp_path)
    raw.request(6, "textDocument/hover", _hover((tmp_path / "m.py").as_uri()))
    assert "error" not in raw.reply(6)


async def test_after_shutdown_a_request_gets_invalid_request_and_exit_says_0(raw, tmp_path):
    """Before: a request after shutdown was never answered."""
    raw.initialize(tmp_path)
    raw.request(2, "shutdown")
    assert raw.reply(2)["result"] is None
    raw.request(3, "textDocument/hover", _hover((tmp_path / "m.py").as_uri()))
    assert raw.reply(3)["error"]["code"] == -32600
    raw.send({"method": "exit"})
    assert raw.exit_code() == 0


async def test_exit_without_shutdown_exits_1(raw, tmp_path):
    """Before: 0, as after a clean shutdown."""
    raw.initialize(tmp_path)
    raw.send({"method": "exit"})
    assert raw.exit_code() == 1


@pytest.mark.parametrize("lie", [-3, 3, 40])
async def test_a_lying_content_length_costs_one_message_not_the_session(raw, tmp_path, lie):
    """Before: every message after the lie was lost (the server answered nothing again)."""
    raw.initialize(tmp_path)
    uri = (tmp_path / "m.py").as_uri()
    raw.request(10, "textDocument/hover", _hover(uri), lie=lie)
    raw.request(11, "textDocument/hover", _hover(uri))
    raw.request(12, "textDocument/hover", _hover(uri))
    assert "error" not in raw.reply(11) and "error" not in raw.reply(12)
    assert 10 in raw.seen  # answered too: with its result, or an error saying it could not be read


async def test_a_huge_content_length_is_skipped_and_the_server_lives(raw, tmp_path):
    """Before: MemoryError, and the server was gone."""
    raw.initialize(tmp_path)
    uri = (tmp_path / "m.py").as_uri()
    body = json.dumps({"jsonrpc": "2.0", "id": 20, "method": "textDocument/hover", "params": _hover(uri)}).encode()
    raw.raw(b"Content-Length: 999999999999999\r\n\r\n" + body)
    raw.request(21, "textDocument/hover", _hover(uri))
    assert "error" not in raw.reply(21)
    assert "too large" in raw.reply(20)["error"]["message"]
    assert raw.proc.poll() is None


async def test_requests_with_invalid_positions_are_answered(raw, tmp_path):
    """Before: a negative position failed to deserialise and the request was never answered."""
    raw.initialize(tmp_path)
    uri = (tmp_path / "m.py").as_uri()
    raw.send({"method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": LEAF}}})
    raw.request(30, "textDocument/hover", _hover(uri, -1, -5))
    raw.request(31, "textDocument/hover", _hover(uri, 10**6, 10**6))
    raw.request(32, "textDocument/codeAction", {"textDocument": {"uri": uri}, "range": {
        "start": {"line": 10**6, "character": 0}, "end": {"line": 10**6 + 1, "character": 3}},
        "context": {"diagnostics": []}})
    raw.request(33, "textDocument/codeAction", {"textDocument": {"uri": uri}, "range": {
        "start": {"line": -1, "character": 0}, "end": {"line": 0, "character": 0}}, "context": {"diagnostics": []}})
    assert raw.reply(30)["error"]["code"] == -32602
    assert raw.reply(31).get("result") is None and "error" not in raw.reply(31)
    assert "error" not in raw.reply(32)
    assert raw.reply(33)["error"]["code"] == -32602


# ---- the framer alone ---------------------------------------------------------------------------
def _frame(body: bytes, lie: int = 0) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % (len(body) + lie) + body


def _messages(data: bytes, chunk: int, limit: int | None = None) -> list:
    from gradguard.lsp.stream import Framer

    framer, out = Framer(limit) if limit else Framer(), []
    for i in range(0, len(data), chunk):
        framer.feed(data[i:i + chunk])
        while (item := framer.pop()) is not None:
            out.append(item)
    return out


@pytest.mark.parametrize("chunk", [1, 7, 65536])
async def test_the_framer_recovers_from_lies_garbage_and_oversized_messages(chunk):
    one, two, three = (json.dumps({"jsonrpc": "2.0", "id": i, "method": "m"}).encode() for i in (1, 2, 3))
    assert _messages(_frame(one) + _frame(two), chunk) == [one, two]
    assert _messages(_frame(one, 25) + _frame(two) + _frame(three), chunk)[-2:] == [two, three]  # too long
    assert _messages(_frame(one, -5) + _frame(two), chunk)[-1] == two  # too short
    assert _messages(b"garbage\r\n\r\nmore" + _frame(two), chunk) == [two]
    out = _messages(_frame(one + b" " * 200) + _frame(two), chunk, limit=100)
    assert out == [("too large", len(one) + 200, 1), two]


async def test_the_framer_is_linear_in_the_message_size():
    body = json.dumps({"jsonrpc": "2.0", "method": "m", "params": {"text": "y = x * 2\n" * 800_000}}).encode()
    started = time.monotonic()
    assert _messages(_frame(body), 65536) == [body]
    assert time.monotonic() - started < 2.0  # 12.6 s when every chunk searched the whole body again


async def test_fix_all_is_not_sent_for_a_document_that_moved_on():
    from types import SimpleNamespace

    from gradguard.lsp.handlers import _stale

    versions = {"file:///a.py": 3}
    ls = SimpleNamespace(workspace=SimpleNamespace(
        get_text_document=lambda uri: SimpleNamespace(version=versions[uri])))

    def edit(version):
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
            text_document=types.OptionalVersionedTextDocumentIdentifier(uri="file:///a.py", version=version),
            edits=[])])

    assert not _stale(ls, edit(3)) and _stale(ls, edit(2)) and not _stale(ls, edit(None))
