"""A finding whose write is in another module of the project than the open document: the editor shows it at the
call in the document (``engine._in_this_file``), and its quick fix edits the module where the write is, through
the one fix path (``Fixer``): a ``WorkspaceEdit`` of that file's URI, at its version when it is open, and no edit
when its text is no longer the one the fix was made for."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from gradguard.text import apply_edits
from test_lsp import change_full, open_doc, wait_publish

pytestmark = pytest.mark.asyncio

GATE = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, x):
            h = torch.tanh(self.proj(x))
            h.mul_(0.5)
            return h
""")

MAIN = textwrap.dedent("""\
    import torch

    from .gate import Gate


    def step():
        torch.manual_seed(0)
        gate = Gate()
        gate(torch.randn(3, 4)).sum().backward()


    if __name__ == "__main__":
        step()
""")


async def _fix_of(client: LanguageClient, uri: str, diag: types.Diagnostic) -> types.CodeAction | None:
    result = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=diag.range,
        context=types.CodeActionContext(diagnostics=[diag], only=[types.CodeActionKind.QuickFix])))
    return next((a for a in result or [] if isinstance(a, types.CodeAction) and not a.title.startswith("Suppress")),
                None)


def _applied(text: str, edits: list[types.TextEdit]) -> str:
    return apply_edits(text, [{"line": e.range.start.line + 1, "column": e.range.start.character + 1,
                               "end_line": e.range.end.line + 1, "end_column": e.range.end.character + 1,
                               "new_text": e.new_text} for e in edits])


async def test_the_quick_fix_of_a_write_in_another_module_edits_that_module(client: LanguageClient, tmp_path: Path):
    for name, text in {"pkg/__init__.py": "", "pkg/gate.py": GATE, "pkg/main.py": MAIN}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    main, gate = (tmp_path / "pkg/main.py").as_uri(), (tmp_path / "pkg/gate.py").as_uri()
    open_doc(client, MAIN, main)
    (diag,) = await wait_publish(client, main, version=1)
    assert (diag.code, diag.range.start.line) == ("GG001", 8)  # at the call in main.py; the write is in gate.py

    # gate.py closed: the edit is of the file's text, unversioned
    action = await _fix_of(client, main, diag)
    assert action is not None and action.title == "Write out of place: `h = h.mul(0.5)`"
    (change,) = action.edit.document_changes
    assert change.text_document.uri == gate and change.text_document.version is None
    assert _applied(GATE, change.edits) == GATE.replace("h.mul_(0.5)", "h = h.mul(0.5)")

    # gate.py open in the editor with the same text: the edit names the open document's version
    open_doc(client, GATE, gate, version=3)
    await wait_publish(client, gate, version=3)
    action = await _fix_of(client, main, diag)
    (change,) = action.edit.document_changes
    assert change.text_document.uri == gate and change.text_document.version == 3
    assert _applied(GATE, change.edits) == GATE.replace("h.mul_(0.5)", "h = h.mul(0.5)")

    # gate.py edited in the editor (not saved): the fix was made for other text, so no edit is offered
    change_full(client, "\n\n" + GATE, version=4, uri=gate)
    await wait_publish(client, gate, version=4)
    assert await _fix_of(client, main, diag) is None
