"""Workspace mode (``"diagnosticMode": "workspace"``: ``workspace/diagnostic``, progress, cancellation, the push
fallback) and multi-root workspaces (each folder's ``[tool.gradguard]``), through a real server process.

The project: folders ``a`` (selects GG002, excludes ``skipped/``, gitignores ``ignored.py``) and ``b`` (selects
GG001), each with ``two_bugs.py``, whose functions break autograd in the two ways (proved with torch below).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from lsp.conftest import SERVER_ENV, _make_default_client
from lsp.test_lsp import open_doc, wait_publish

pytestmark = pytest.mark.asyncio

TWO_BUGS = """import torch


def leaf():
    w = torch.zeros(3, requires_grad=True)
    w += 1  # GG002: a leaf that requires grad
    return w


def saved():
    x = torch.ones(3, requires_grad=True)
    y = torch.exp(x)
    y += 1  # GG001: exp saved its output for backward
    y.sum().backward()
"""
CLEAN = "import torch\n\n\ndef f(x):\n    return torch.exp(x) + 1\n"
LEAF = "import torch\nw = torch.zeros(3, requires_grad=True)\nw += 1\n"
NOTEBOOK_CELLS = [("code", "import torch\nw = torch.zeros(3, requires_grad=True)"), ("markdown", "# in place"),
                  ("code", "w += 1")]
WORKSPACE = {"diagnosticMode": "workspace"}


def notebook_json(cells: list[tuple[str, str]]) -> str:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {"language_info": {"name": "python"}},
                       "cells": [{"cell_type": kind, "id": f"c{i}", "metadata": {}, "source": source,
                                  **({"outputs": [], "execution_count": None} if kind == "code" else {})}
                                 for i, (kind, source) in enumerate(cells)]})


def write_project(root: Path) -> None:
    files = {
        "a/pyproject.toml": '[tool.gradguard]\nselect = ["GG002"]\nexclude = ["skipped/"]\n',
        "a/.gitignore": "ignored.py\n",
        "a/two_bugs.py": TWO_BUGS,
        "a/clean.py": CLEAN,
        "a/skipped/bad.py": LEAF,
        "a/ignored.py": LEAF,
        "a/nb.ipynb": notebook_json(NOTEBOOK_CELLS),
        "b/pyproject.toml": '[tool.gradguard]\nselect = ["GG001"]\n',
        "b/two_bugs.py": TWO_BUGS,
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.fixture
def folders(request: pytest.FixtureRequest) -> list[str]:
    return getattr(request, "param", ["a", "b"])


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "gradguard.lsp"],
                                              client_factory=_make_default_client, server_env=SERVER_ENV))
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient, tmp_path: Path, folders: list[str]):
    """The project written to ``tmp_path``, then a session with workspace folders ``folders`` (the root: the
    first); a client that pulls with @pytest.mark.pull, initializationOptions from @pytest.mark.init_options."""
    write_project(tmp_path)
    caps = client_capabilities("visual-studio-code")
    caps.workspace.did_change_watched_files = None
    if request.node.get_closest_marker("pull") is None:
        caps.text_document.diagnostic = None
    else:
        caps.text_document.diagnostic = types.DiagnosticClientCapabilities(related_document_support=False)
        caps.workspace.diagnostics = types.DiagnosticWorkspaceClientCapabilities(refresh_support=True)
    init = request.node.get_closest_marker("init_options")
    lsp_client.init_result = await lsp_client.initialize_session(types.InitializeParams(  # type: ignore[attr-defined]
        capabilities=caps, root_uri=(tmp_path / folders[0]).as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=(tmp_path / f).as_uri(), name=f) for f in folders],
        initialization_options=init.args[0] if init is not None else None))
    yield
    await lsp_client.shutdown_session()


def uri(tmp_path: Path, name: str) -> str:
    return (tmp_path / name).as_uri()


async def pull_workspace(client: LanguageClient, previous: dict[str, str] | None = None, token: str | None = None):
    if token is not None:
        client.progress_reports.setdefault(token, [])
    return await client.workspace_diagnostic_async(types.WorkspaceDiagnosticParams(
        previous_result_ids=[types.PreviousResultId(uri=u, value=v) for u, v in (previous or {}).items()],
        work_done_token=token))


def ids(result) -> dict[str, str]:
    """The previousResultIds a client sends after ``result``."""
    return {r.uri: r.result_id for r in result.items if r.result_id}


def codes(report) -> list[str]:
    return sorted(str(d.code) for d in report.items)


@pytest.mark.filterwarnings("ignore::pytest.PytestWarning")  # not async: the module's asyncio mark does not apply
def test_the_fixtures_break_autograd_and_the_clean_file_does_not():
    torch = pytest.importorskip("torch")
    scope: dict = {}
    exec(compile(TWO_BUGS, "two_bugs.py", "exec"), scope)
    for name in ("leaf", "saved"):
        with pytest.raises(RuntimeError):
            scope[name]()
    for source in (LEAF, "\n".join(s for kind, s in NOTEBOOK_CELLS if kind == "code")):
        with pytest.raises(RuntimeError):
            exec(compile(source, "leaf.py", "exec"), {})
    clean: dict = {}
    exec(compile(CLEAN, "clean.py", "exec"), clean)
    x = torch.ones(3, requires_grad=True)
    clean["f"](x).sum().backward()


async def test_capabilities_declare_workspace_diagnostics(client: LanguageClient):
    provider = client.init_result.capabilities.diagnostic_provider  # type: ignore[attr-defined]
    assert provider.workspace_diagnostics is True


@pytest.mark.pull
@pytest.mark.init_options(WORKSPACE)
async def test_workspace_pull_reports_every_file_of_every_folder_with_its_own_config(client, tmp_path):
    open_doc(client, LEAF, uri(tmp_path, "a/clean.py"), version=3)  # the editor's text, not the disk's
    result = await pull_workspace(client, token="tok")
    reports = {r.uri: r for r in result.items}
    assert sorted(reports) == sorted(uri(tmp_path, n) for n in ["a/clean.py", "a/nb.ipynb", "a/two_bugs.py", "b/two_bugs.py"])
    assert codes(reports[uri(tmp_path, "a/two_bugs.py")]) == ["GG002"]
    assert codes(reports[uri(tmp_path, "b/two_bugs.py")]) == ["GG001"]
    assert reports[uri(tmp_path, "a/clean.py")].version == 3 and codes(reports[uri(tmp_path, "a/clean.py")]) == ["GG002"]
    notebook = reports[uri(tmp_path, "a/nb.ipynb")]
    assert codes(notebook) == ["GG002"] and notebook.items[0].message.startswith("cell 3, line 1: ")
    saved = reports[uri(tmp_path, "b/two_bugs.py")].items[0]
    assert saved.range.start.line == 12 and saved.related_information  # where exp saved it
    kinds = [p.kind for p in client.progress_reports["tok"]]
    assert kinds[0] == "begin" and kinds[-1] == "end" and "report" in kinds

    again = await pull_workspace(client, ids(result), token="tok2")
    assert all(isinstance(r, types.WorkspaceUnchangedDocumentDiagnosticReport) for r in again.items)
    assert len(again.items) == 4 and client.progress_reports["tok2"] == []  # nothing to do: no progress

    (tmp_path / "b/two_bugs.py").write_text(CLEAN)  # changed on disk: analysed again
    third = await pull_workspace(client, ids(result))
    changed = [r for r in third.items if isinstance(r, types.WorkspaceFullDocumentDiagnosticReport)]
    assert [(r.uri, list(r.items)) for r in changed] == [(uri(tmp_path, "b/two_bugs.py"), [])]

    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"gradguard": {}, "diagnosticMode": "openFiles"}))
    off = await pull_workspace(client, ids(third))
    assert {r.uri: list(r.items) for r in off.items} == {uri(tmp_path, n): [] for n in ["a/two_bugs.py", "a/nb.ipynb"]}
    assert list((await pull_workspace(client, ids(off))).items) == []  # cleared once; open a/clean.py is pulled


@pytest.mark.pull
@pytest.mark.init_options(WORKSPACE)
@pytest.mark.parametrize("folders", [["a"]], indirect=True)
async def test_workspace_folders_added_and_removed(client, tmp_path, folders):
    first = await pull_workspace(client)
    assert {r.uri for r in first.items} == {uri(tmp_path, n) for n in ["a/clean.py", "a/nb.ipynb", "a/two_bugs.py"]}
    client.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(
        event=types.WorkspaceFoldersChangeEvent(added=[types.WorkspaceFolder(uri=uri(tmp_path, "b"), name="b")],
                                                removed=[types.WorkspaceFolder(uri=uri(tmp_path, "a"), name="a")])))
    second = await pull_workspace(client, ids(first))
    reports = {r.uri: codes(r) for r in second.items}
    # b's file with b's rules; a's files with findings are cleared once
    assert reports == {uri(tmp_path, "b/two_bugs.py"): ["GG001"], uri(tmp_path, "a/two_bugs.py"): [],
                       uri(tmp_path, "a/nb.ipynb"): []}
    third = await pull_workspace(client, ids(second))
    assert [r.uri for r in third.items] == [uri(tmp_path, "b/two_bugs.py")]


@pytest.mark.pull
@pytest.mark.init_options(WORKSPACE)
@pytest.mark.parametrize("folders", [["big"]], indirect=True)
async def test_cancelling_a_workspace_pull_stops_the_work(client, tmp_path, folders):
    body = "".join(TWO_BUGS.replace("def leaf", f"def leaf{i}").replace("def saved", f"def saved{i}").split("\n", 1)[1]
                   for i in range(8))
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "m000.py").write_text("import torch\n" + body)
    assert len((await pull_workspace(client)).items) == 1  # the worker processes are started
    for i in range(1, 120):
        (tmp_path / "big" / f"m{i:03}.py").write_text("import torch\n" + body)
    request = asyncio.ensure_future(client.protocol.send_request_async(types.WORKSPACE_DIAGNOSTIC, types.WorkspaceDiagnosticParams(
        previous_result_ids=[]), msg_id="ws-1"))
    while len(client.progress_reports) < 2 and not request.done():  # the server created its token, began
        await asyncio.sleep(0.01)
    client.cancel_request(types.CancelParams(id="ws-1"))
    with pytest.raises(Exception) as cancelled:
        await asyncio.wait_for(request, 30)
    assert "cancel" in str(cancelled.value).lower()
    reports = list(client.progress_reports.values())[-1]
    assert [p.kind for p in reports][-1] == "end" and reports[-1].message == "cancelled"
    cache = tmp_path / "big" / ".gradguard_cache"
    await asyncio.sleep(0.5)  # a cache write under way when the answer went may end
    cancelled_at = len(list(cache.rglob("v1/*/*")))
    await asyncio.sleep(3.0)  # had the work gone on, the two workers would have cached some 30-90 files by now
    assert len(list(cache.rglob("v1/*/*"))) == cancelled_at < 60  # no chunk was started after the cancel
    result = await pull_workspace(client)  # and the server goes on
    assert len(result.items) == 120 and all(codes(r) == ["GG001"] * 8 + ["GG002"] * 8 for r in result.items)


@pytest.mark.pull
async def test_open_files_mode_answers_workspace_pull_empty_and_pulls_documents_per_folder(client, tmp_path):
    assert list((await pull_workspace(client)).items) == []
    for name, expected in [("a/two_bugs.py", ["GG002"]), ("b/two_bugs.py", ["GG001"])]:
        open_doc(client, TWO_BUGS, uri(tmp_path, name))
        report = await client.text_document_diagnostic_async(types.DocumentDiagnosticParams(
            text_document=types.TextDocumentIdentifier(uri=uri(tmp_path, name))))
        assert codes(report) == expected


async def test_open_files_mode_pushes_open_documents_only_with_their_folders_config(client, tmp_path):
    open_doc(client, TWO_BUGS, uri(tmp_path, "b/two_bugs.py"))
    assert sorted(str(d.code) for d in await wait_publish(client, uri(tmp_path, "b/two_bugs.py"))) == ["GG001"]
    open_doc(client, TWO_BUGS, uri(tmp_path, "a/two_bugs.py"))
    assert sorted(str(d.code) for d in await wait_publish(client, uri(tmp_path, "a/two_bugs.py"))) == ["GG002"]
    assert {p.uri for p in client.published} == {uri(tmp_path, "a/two_bugs.py"), uri(tmp_path, "b/two_bugs.py")}


@pytest.mark.init_options(WORKSPACE)
async def test_a_client_that_cannot_pull_gets_the_closed_files_pushed(client, tmp_path):
    nb = await wait_publish(client, uri(tmp_path, "a/nb.ipynb"))
    assert [str(d.code) for d in nb] == ["GG002"]
    published = {p.uri: sorted(str(d.code) for d in p.diagnostics) for p in client.published}
    assert published.get(uri(tmp_path, "b/two_bugs.py"), ["GG001"]) == ["GG001"]
    assert uri(tmp_path, "a/skipped/bad.py") not in published and uri(tmp_path, "a/ignored.py") not in published
    open_doc(client, CLEAN, uri(tmp_path, "a/two_bugs.py"))
    assert list(await wait_publish(client, uri(tmp_path, "a/two_bugs.py"), version=1)) == []  # the editor's text
    client.text_document_did_close(types.DidCloseTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=uri(tmp_path, "a/two_bugs.py"))))
    for _ in range(3):  # closed: the disk's text again (an empty publish may come first)
        shown = await wait_publish(client, uri(tmp_path, "a/two_bugs.py"))
        if shown:
            break
    assert [str(d.code) for d in shown] == ["GG002"]
