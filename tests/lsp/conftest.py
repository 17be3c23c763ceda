"""pytest-lsp fixtures: a real ``python -m gradguard.lsp`` subprocess per test.

The client declares VS Code's capabilities (as pytest-lsp recorded them), except:
  - it pulls diagnostics (textDocument/diagnostic, with workspace/diagnostic/refresh) only when the test
    is marked @pytest.mark.pull; otherwise the server pushes them;
  - it does not offer dynamic file watching unless the test is marked @pytest.mark.watch;
  - it gets code actions with their edits (like eglot) unless the test is marked @pytest.mark.resolve: then
    it announces ``codeAction.resolveSupport`` for ``edit`` and resolves them (``codeAction/resolve``).
Other markers:
  @pytest.mark.init_options({...})     initializationOptions
  @pytest.mark.encodings(["utf-8"])    general.positionEncodings offered by the client
  @pytest.mark.hover_formats(["plaintext"])  textDocument.hover.contentFormat (VS Code's: markdown first)
The client records pushed diagnostics (``client.published``), ``client/registerCapability`` requests
(``client.registrations``) and ``workspace/applyEdit`` requests (``client.applied_edits``; it answers
``applied: true`` without changing anything: the test sends the resulting text itself).
"""

from __future__ import annotations

import os
import sys

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "init_options(options): initializationOptions for the LSP test client")
    config.addinivalue_line("markers", "encodings(list): position encodings the LSP test client offers")
    config.addinivalue_line("markers", "pull: the LSP test client pulls diagnostics (textDocument/diagnostic)")
    config.addinivalue_line("markers", "watch: the LSP test client allows dynamic registration of file watchers")
    config.addinivalue_line("markers", "resolve: the LSP test client resolves code actions' edits (codeAction/resolve)")
    config.addinivalue_line("markers", "hover_formats(list): textDocument.hover.contentFormat of the LSP test client")


def _record_publish(client: LanguageClient, params: types.PublishDiagnosticsParams) -> None:
    client.diagnostics[params.uri] = params.diagnostics
    client.published.append(params)  # type: ignore[attr-defined]


def _record_registration(client: LanguageClient, params: types.RegistrationParams) -> None:
    client.registrations.extend(params.registrations)  # type: ignore[attr-defined]


def _record_apply_edit(client: LanguageClient, params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
    client.applied_edits.append(params)  # type: ignore[attr-defined]
    return types.ApplyWorkspaceEditResult(applied=True)


def _make_default_client() -> LanguageClient:
    from pytest_lsp.client import default_converter

    client = LanguageClient(converter_factory=default_converter)
    client.published = []  # type: ignore[attr-defined]
    client.registrations = []  # type: ignore[attr-defined]
    client.applied_edits = []  # type: ignore[attr-defined]
    register_lsp_features(
        client,
        {
            **DEFAULT_CLIENT_FEATURES,
            types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: _record_publish,
            types.CLIENT_REGISTER_CAPABILITY: _record_registration,
            types.WORKSPACE_APPLY_EDIT: _record_apply_edit,
        },
    )
    return client


SERVER_ENV = {**os.environ, "GRADGUARD_LSP_DEBOUNCE_MS": "20"}


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=[sys.executable, "-m", "gradguard.lsp"],
        client_factory=_make_default_client,
        server_env=SERVER_ENV,
    )
)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient, tmp_path):
    caps = client_capabilities("visual-studio-code")
    if request.node.get_closest_marker("pull") is None:
        caps.text_document.diagnostic = None
    else:
        caps.text_document.diagnostic = types.DiagnosticClientCapabilities(related_document_support=False)
        caps.workspace.diagnostics = types.DiagnosticWorkspaceClientCapabilities(refresh_support=True)
    if request.node.get_closest_marker("watch") is None and caps.workspace is not None:
        caps.workspace.did_change_watched_files = None
    if request.node.get_closest_marker("resolve") is None:
        caps.text_document.code_action.resolve_support = None
    encodings = request.node.get_closest_marker("encodings")
    if encodings is not None:
        caps.general = caps.general or types.GeneralClientCapabilities()
        caps.general.position_encodings = list(encodings.args[0])
    hover_formats = request.node.get_closest_marker("hover_formats")
    if hover_formats is not None:
        caps.text_document.hover = types.HoverClientCapabilities(content_format=list(hover_formats.args[0]))
    init = request.node.get_closest_marker("init_options")
    lsp_client.init_result = await lsp_client.initialize_session(  # type: ignore[attr-defined]
        types.InitializeParams(
            capabilities=caps,
            root_uri=tmp_path.as_uri(),
            initialization_options=init.args[0] if init is not None else None,
        )
    )
    yield
    await lsp_client.shutdown_session()
