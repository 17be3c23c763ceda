"""pytest-lsp fixtures: a real ``python -m gradguard.lsp`` subprocess per test.

Markers on a test choose how the client initialises:
  @pytest.mark.init_options({...})     initializationOptions
  @pytest.mark.encodings(["utf-8"])    general.positionEncodings offered by the client
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


def _record_publish(client: LanguageClient, params: types.PublishDiagnosticsParams) -> None:
    client.diagnostics[params.uri] = params.diagnostics
    client.published.append(params)  # type: ignore[attr-defined]


def _make_default_client() -> LanguageClient:
    from pytest_lsp.client import default_converter

    client = LanguageClient(converter_factory=default_converter)
    client.published = []  # type: ignore[attr-defined]
    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: _record_publish})
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
    encodings = request.node.get_closest_marker("encodings")
    if encodings is not None:
        caps.general = caps.general or types.GeneralClientCapabilities()
        caps.general.position_encodings = list(encodings.args[0])
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
