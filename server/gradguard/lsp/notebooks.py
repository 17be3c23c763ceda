"""LSP 3.17 notebook sync: the ``notebookDocument/*`` handlers.

The server declares ``notebookDocumentSync`` for ``jupyter-notebook`` notebooks with Python cells (pygls keeps
the notebook and its cells as text documents in ``ls.workspace``).  On ``didOpen``, ``didChange`` (debounced;
not with ``"run": "onSave"``) and ``didSave`` the notebook goes down the server's one analysis path as a
``documents.NotebookDocument``: its code cells, in notebook order, are analysed as one program, so a tensor
saved in one cell and mutated in a later one is found, and the position map sends each finding, related
location and fix edit to its cell.  Cell diagnostics are always pushed, also to a client that pulls them for
text documents (a pull for a cell is answered empty, so nothing is shown twice); ``didClose`` clears every cell.
Code actions, fix-all (of one cell, as ``--fix`` plans it) and hover are the text documents' (``actions.py``).
"""

from __future__ import annotations

from typing import Any, Callable

from lsprotocol import types

from .server import GradguardServer


def register(server: GradguardServer, safe: Callable[..., Any]) -> None:
    """Add the notebookDocument/* handlers to ``server`` (each wrapped by ``safe()``)."""

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    @safe()
    def did_open_notebook(ls: GradguardServer, params: types.DidOpenNotebookDocumentParams) -> None:
        ls.reload_if_pyproject_changed()
        ls.schedule(ls.open_notebook(params.notebook_document.uri), delay=0)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    @safe()
    def did_change_notebook(ls: GradguardServer, params: types.DidChangeNotebookDocumentParams) -> None:
        ls.reload_if_pyproject_changed()
        document = ls.documents.get(params.notebook_document.uri)
        if document is not None and ls.run_on_type:
            ls.schedule(document)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    @safe()
    def did_save_notebook(ls: GradguardServer, params: types.DidSaveNotebookDocumentParams) -> None:
        ls.reload_if_pyproject_changed()
        document = ls.documents.get(params.notebook_document.uri)
        if document is not None:
            ls.schedule(document, delay=0)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    @safe()
    def did_close_notebook(ls: GradguardServer, params: types.DidCloseNotebookDocumentParams) -> None:
        ls.close(params.notebook_document.uri, [c.uri for c in params.cell_text_documents])
