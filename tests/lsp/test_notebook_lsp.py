"""LSP 3.17 notebook sync (gradguard.lsp.notebooks) end to end with pytest-lsp.

The client declares VS Code's capabilities plus notebook document sync, pushes diagnostics, and opens a
``jupyter-notebook`` whose cells are text documents (URIs like VS Code's ``vscode-notebook-cell:``).
"""

from __future__ import annotations

import asyncio
import os
import sys

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, default_converter, register_lsp_features

NB_URI = "file:///tmp/gradguard-nb/explore.ipynb"
CELLS = [
    "import torch",
    "# setup\n",  # a markdown cell between the code cells
    "x = torch.randn(3, requires_grad=True)\ny = torch.sigmoid(x)",
    "y += 1\ny.sum().backward()",
]
KINDS = [types.NotebookCellKind.Code, types.NotebookCellKind.Markup, types.NotebookCellKind.Code, types.NotebookCellKind.Code]


def cell_uri(i: int) -> str:
    return f"vscode-notebook-cell:/tmp/gradguard-nb/explore.ipynb#W{i}sZmlsZQ%3D%3D"


def _record_publish(client: LanguageClient, params: types.PublishDiagnosticsParams) -> None:
    client.diagnostics[params.uri] = params.diagnostics
    client.published.append(params)  # type: ignore[attr-defined]


def _make_client() -> LanguageClient:
    client = LanguageClient(converter_factory=default_converter)
    client.published = []  # type: ignore[attr-defined]
    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: _record_publish})
    return client


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=[sys.executable, "-m", "gradguard.lsp"],
        client_factory=_make_client,
        server_env={**os.environ, "GRADGUARD_LSP_DEBOUNCE_MS": "20"},
    )
)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient, tmp_path):
    caps = client_capabilities("visual-studio-code")
    if request.node.get_closest_marker("resolve") is None:  # see conftest.py
        caps.text_document.code_action.resolve_support = None
    caps.text_document.diagnostic = None  # push
    caps.workspace.did_change_watched_files = None
    caps.notebook_document = types.NotebookDocumentClientCapabilities(
        synchronization=types.NotebookDocumentSyncClientCapabilities(execution_summary_support=True)
    )
    lsp_client.init_result = await lsp_client.initialize_session(  # type: ignore[attr-defined]
        types.InitializeParams(capabilities=caps, root_uri=tmp_path.as_uri())
    )
    yield
    await lsp_client.shutdown_session()


def open_notebook(client: LanguageClient, cells: list[str] = CELLS, kinds=KINDS) -> None:
    client.notebook_document_did_open(
        types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(
                uri=NB_URI,
                notebook_type="jupyter-notebook",
                version=1,
                cells=[types.NotebookCell(kind=k, document=cell_uri(i)) for i, k in enumerate(kinds)],
            ),
            cell_text_documents=[
                types.TextDocumentItem(
                    uri=cell_uri(i),
                    language_id="python" if k == types.NotebookCellKind.Code else "markdown",
                    version=1,
                    text=text,
                )
                for i, (k, text) in enumerate(zip(kinds, cells))
            ],
        )
    )


def edit_cell(client: LanguageClient, i: int, nb_version: int, cell_version: int, rng: types.Range, text: str) -> None:
    client.notebook_document_did_change(
        types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(uri=NB_URI, version=nb_version),
            change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(
                    text_content=[
                        types.NotebookDocumentCellContentChanges(
                            document=types.VersionedTextDocumentIdentifier(uri=cell_uri(i), version=cell_version),
                            changes=[types.TextDocumentContentChangePartial(range=rng, text=text)],
                        )
                    ]
                )
            ),
        )
    )


def rng(l0: int, c0: int, l1: int, c1: int) -> types.Range:
    return types.Range(start=types.Position(line=l0, character=c0), end=types.Position(line=l1, character=c1))


async def wait_for(client: LanguageClient, predicate, timeout: float = 15.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out; published: {[(p.uri, len(p.diagnostics)) for p in client.published]}")
        await asyncio.sleep(0.02)


def findings(client: LanguageClient, i: int) -> list[types.Diagnostic]:
    return [d for d in client.diagnostics.get(cell_uri(i), []) if d.source == "gradguard"]


def apply(text: str, edits: list[types.TextEdit]) -> str:
    """Apply LSP edits (ASCII text, so UTF-16 units are characters) to ``text``."""
    lines = text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        start = offsets[e.range.start.line] + e.range.start.character
        end = offsets[e.range.end.line] + e.range.end.character
        text = text[:start] + e.new_text + text[end:]
    return text


async def cross_cell_finding(client: LanguageClient) -> types.Diagnostic:
    open_notebook(client)
    await wait_for(client, lambda: findings(client, 3))
    (diag,) = findings(client, 3)
    return diag


@pytest.mark.asyncio
async def test_server_declares_notebook_sync(client: LanguageClient):
    sync = client.init_result.capabilities.notebook_document_sync  # type: ignore[attr-defined]
    assert sync is not None and sync.save is True
    (selector,) = sync.notebook_selector
    assert selector.notebook == "jupyter-notebook"
    assert [c.language for c in selector.cells] == ["python"]


@pytest.mark.asyncio
async def test_cross_cell_finding_lands_on_the_mutating_cell_with_related_info_in_the_saving_cell(client: LanguageClient):
    diag = await cross_cell_finding(client)
    assert diag.code == "GG001"
    assert diag.range.start.line == 0 and diag.range.start.character == 0  # `y += 1`: cell 3 (index 3), line 1
    assert diag.data["cell"] == 4 and diag.data["version"] == 1
    assert "line 2 of cell 3" in diag.message  # cells counted as the client sent them, markdown included
    related = {r.location.uri: r.location.range.start.line for r in diag.related_information}
    assert related[cell_uri(2)] == 1  # torch.sigmoid on line 2 of the cell that saved it
    assert related.get(cell_uri(3)) == 1  # the backward
    # every publish went to a cell uri; the clean cells got nothing
    assert {p.uri for p in client.published} == {cell_uri(3)}
    assert not findings(client, 0) and not findings(client, 2)


@pytest.mark.asyncio
async def test_quick_fix_edits_the_right_cell_and_suppress_targets_it(client: LanguageClient):
    diag = await cross_cell_finding(client)
    assert "fix" not in diag.data  # built when the code action asks for it
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=cell_uri(3)),
            range=diag.range,
            context=types.CodeActionContext(diagnostics=[diag], only=[types.CodeActionKind.QuickFix]),
        )
    )
    by_title = {a.title: a for a in actions}
    fix = next(a for a in actions if not a.title.startswith("Suppress"))
    assert fix.is_preferred
    (change,) = fix.edit.document_changes
    assert change.text_document.uri == cell_uri(3) and change.text_document.version == 1
    fixed = apply(CELLS[3], change.edits)
    assert fixed.startswith("y = y + 1\n")
    (suppress_change,) = by_title["Suppress GG001 on this line"].edit.document_changes
    assert suppress_change.text_document.uri == cell_uri(3)
    assert apply(CELLS[3], suppress_change.edits).split("\n")[0] == "y += 1  # gradguard: ignore[GG001]"

    # the client applies the fix to cell 3: the finding goes away, the cell's diagnostics are cleared
    count = len(client.published)
    edit_cell(client, 3, 2, 2, rng(0, 0, 1, 0), fixed.split("\n")[0] + "\n")
    await wait_for(client, lambda: len(client.published) > count and not findings(client, 3))
    assert client.published[-1].uri == cell_uri(3) and client.published[-1].version == 2

    # hover and code actions on a clean cell of the notebook answer nothing
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=cell_uri(2)), position=types.Position(line=1, character=1))
    )
    assert hover is None


@pytest.mark.asyncio
async def test_editing_the_saving_cell_clears_the_finding_in_the_later_cell(client: LanguageClient):
    diag = await cross_cell_finding(client)
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=cell_uri(3)), position=diag.range.start)
    )
    assert hover is not None and "GG001" in hover.contents.value
    # `y = torch.sigmoid(x)` -> `y = x * 2` in cell 2 (index 2): nothing saves y any more
    edit_cell(client, 2, 2, 2, rng(1, 4, 1, 20), "x * 2")
    await wait_for(client, lambda: not findings(client, 3))
    assert not findings(client, 2)
    # fix-all on the now clean cell: nothing to do
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=cell_uri(3)),
            range=rng(0, 0, 0, 0),
            context=types.CodeActionContext(diagnostics=[], only=["source.fixAll.gradguard"]),
        )
    )
    assert not actions


@pytest.mark.asyncio
async def test_fix_all_of_a_cell_and_close_clears_every_cell(client: LanguageClient):
    diag = await cross_cell_finding(client)
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=cell_uri(3)),
            range=diag.range,
            context=types.CodeActionContext(diagnostics=[], only=["source.fixAll.gradguard"]),
        )
    )
    (fix_all,) = actions
    (change,) = fix_all.edit.document_changes
    assert change.text_document.uri == cell_uri(3)
    assert apply(CELLS[3], change.edits).startswith("y = y + 1\n")

    client.notebook_document_did_close(
        types.DidCloseNotebookDocumentParams(
            notebook_document=types.NotebookDocumentIdentifier(uri=NB_URI),
            cell_text_documents=[types.TextDocumentIdentifier(uri=cell_uri(i)) for i in range(len(CELLS))],
        )
    )
    await wait_for(client, lambda: all(cell_uri(i) in client.diagnostics for i in range(len(CELLS))) and not findings(client, 3))
    assert all(not client.diagnostics[cell_uri(i)] for i in range(len(CELLS)))
    assert {p.uri for p in client.published[-len(CELLS):]} == {cell_uri(i) for i in range(len(CELLS))}


@pytest.mark.asyncio
async def test_a_cell_that_does_not_parse_gets_gg900_and_the_rest_is_still_checked(client: LanguageClient):
    cells = [*CELLS, "def broken(:\n    pass"]
    kinds = [*KINDS, types.NotebookCellKind.Code]
    open_notebook(client, cells, kinds)
    await wait_for(client, lambda: findings(client, 3) and findings(client, 4))
    assert [d.code for d in findings(client, 3)] == ["GG001"]
    assert [d.code for d in findings(client, 4)] == ["GG900"]


@pytest.mark.asyncio
async def test_deleting_the_mutating_cell_clears_its_diagnostics(client: LanguageClient):
    await cross_cell_finding(client)
    client.notebook_document_did_change(
        types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(uri=NB_URI, version=2),
            change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(
                    structure=types.NotebookDocumentCellChangeStructure(
                        array=types.NotebookCellArrayChange(start=3, delete_count=1, cells=[]),
                        did_close=[types.TextDocumentIdentifier(uri=cell_uri(3))],
                    )
                )
            ),
        )
    )
    await wait_for(client, lambda: not findings(client, 3))
    assert client.published[-1].uri == cell_uri(3)


# ---- notebook.source.fixAll.gradguard: every cell at once ------------------------------------
# CELLS plus a second finding in other cells: `z.mul_(2)` on exp's output (torch: backward raises; fixed, runs).
TWO_FIXABLE = [*CELLS, "z = torch.exp(x)", "z.mul_(2)\nz.sum().backward()"]
TWO_KINDS = [*KINDS, types.NotebookCellKind.Code, types.NotebookCellKind.Code]


async def notebook_fix_all(client: LanguageClient) -> list[types.CodeAction]:
    open_notebook(client, TWO_FIXABLE, TWO_KINDS)
    await wait_for(client, lambda: findings(client, 3) and findings(client, 5))
    return await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=cell_uri(0)), range=rng(0, 0, 0, 0),
        context=types.CodeActionContext(diagnostics=[], only=["notebook.source.fixAll"])))


def fixed_cells(action: types.CodeAction) -> dict[str, str]:
    return {c.text_document.uri: apply(TWO_FIXABLE[[cell_uri(i) for i in range(6)].index(c.text_document.uri)], c.edits)
            for c in action.edit.document_changes}


@pytest.mark.asyncio
async def test_notebook_fix_all_fixes_every_cell(client: LanguageClient):
    (action,) = await notebook_fix_all(client)  # asked on the first cell, which has no finding
    assert action.kind == "notebook.source.fixAll.gradguard"
    assert fixed_cells(action) == {cell_uri(3): "y = y + 1\ny.sum().backward()", cell_uri(5): "z = z.mul(2)\nz.sum().backward()"}
    assert all(c.text_document.version == 1 for c in action.edit.document_changes)


@pytest.mark.asyncio
@pytest.mark.resolve
async def test_notebook_fix_all_is_resolved(client: LanguageClient):
    (action,) = await notebook_fix_all(client)
    assert action.edit is None and action.data["action"] == "notebookFixAll"
    resolved = await client.code_action_resolve_async(action)
    assert set(fixed_cells(resolved)) == {cell_uri(3), cell_uri(5)}
