"""The server does not hold on to what an edit replaced: a line edit re-parses the file below it, and the
document's previous cache (with that half of the syntax tree) is kept only until the new findings are sent
(``Document.retired``, freed after the publish or the reply).  Memory must stay flat over many line edits,
pushed or pulled."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient
from test_lsp import URI, change_range, open_doc, pull, rng

pytestmark = pytest.mark.asyncio

FUNCTION = '''def step_{n}():
    w = torch.randn(3, requires_grad=True)
    y = torch.exp(w)
    y.add_(1)
    z = y * 2
    z = z + 1
    z = z - 1
    z = z * 3
    z = z / 3
    z.sum().backward()


'''
TEXT = "import torch\n\n\n" + "".join(FUNCTION.format(n=n) for n in range(270))  # about 3,000 lines
MIDDLE = TEXT.count("\n") // 2 + 3  # inside a function: every line below moves at each edit
EDITS = 40


def server_rss_mib(client: LanguageClient) -> float:
    status = Path(f"/proc/{client._server.pid}/status").read_text()  # type: ignore[union-attr]
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024


def edit(client: LanguageClient, version: int) -> None:
    """Insert a comment line in the middle (even versions), remove it again (odd)."""
    if version % 2 == 0:
        change_range(client, rng(MIDDLE, 0, MIDDLE, 0), "    # note\n", version=version)
    else:
        change_range(client, rng(MIDDLE, 0, MIDDLE + 1, 0), "", version=version)


async def published(client: LanguageClient, version: int) -> list[types.Diagnostic]:
    while not any(p.uri == URI and p.version == version for p in client.published):  # type: ignore[attr-defined]
        await asyncio.sleep(0.01)
    return next(p for p in reversed(client.published) if p.uri == URI and p.version == version).diagnostics


async def edits_then_growth(client: LanguageClient, findings) -> float:
    """RSS growth (MiB) from the 10th to the last line edit, each awaited to its findings."""
    open_doc(client, TEXT)
    assert len(await findings(1)) == 270
    for version in range(2, EDITS + 2):
        edit(client, version)
        assert len(await findings(version)) == 270
        if version == 11:
            start = server_rss_mib(client)
    return server_rss_mib(client) - start


async def test_pushed_line_edits_keep_memory_flat(client: LanguageClient):
    growth = await asyncio.wait_for(edits_then_growth(client, lambda v: published(client, v)), 120)
    assert growth < 25, f"the server grew by {growth:.0f} MiB over {EDITS - 10} line edits"


@pytest.mark.pull
async def test_pulled_line_edits_keep_memory_flat(client: LanguageClient):
    async def pulled(version: int) -> list[types.Diagnostic]:
        return (await pull(client)).items

    growth = await asyncio.wait_for(edits_then_growth(client, pulled), 120)
    assert growth < 25, f"the server grew by {growth:.0f} MiB over {EDITS - 10} line edits"
