"""``codeAction/resolve``: a client that announces ``resolveSupport`` for ``edit`` (VS Code, Neovim 0.8+) gets
code actions without edits, each with a small ``data``, and their edits on resolve; a stale ``data`` gets no
edit.  Clients that cannot resolve still get edits at once (the other tests in tests/lsp run as such a client)."""

from __future__ import annotations

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient
from test_baseline import TRAIN
from test_lsp import LEAF, URI, _fixable_fixture, apply_edits, change_range, open_doc, rng, wait_publish

from gradguard.api import analyze_source

pytestmark = pytest.mark.asyncio


async def actions_for(client: LanguageClient, diags, only) -> list[types.CodeAction]:
    result = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), range=diags[0].range if diags else rng(0, 0, 0, 0),
        context=types.CodeActionContext(diagnostics=list(diags), only=only)))
    return [a for a in result or [] if isinstance(a, types.CodeAction)]


async def test_resolve_is_advertised(client: LanguageClient):
    options = client.init_result.capabilities.code_action_provider  # type: ignore[attr-defined]
    assert options.resolve_provider is True
    assert "notebook.source.fixAll.gradguard" in options.code_action_kinds


@pytest.mark.resolve
async def test_quick_fixes_are_listed_without_edits_and_resolved(client: LanguageClient):
    open_doc(client, TRAIN)  # `y.mul_(2)` on sigmoid's output: a safe fix `y = y.mul(2)`
    diags = await wait_publish(client, URI, version=1)
    listed = await actions_for(client, diags, [types.CodeActionKind.QuickFix])
    assert "fix" not in diags[0].data  # published before any fix is built: listing builds those it lists
    fix = analyze_source(TRAIN).diagnostics[0].fix
    assert [a.title for a in listed] == [fix.title, "Suppress GG001 on this line"]
    assert listed[0].is_preferred and all(a.edit is None for a in listed)
    for action in listed:
        assert action.data["uri"] == URI and action.data["version"] == 1 and len(action.data) <= 6
    resolved = await client.code_action_resolve_async(listed[0])
    (change,) = resolved.edit.document_changes
    assert change.text_document.version == 1
    fixed = apply_edits(TRAIN, change.edits)
    assert "    y = y.mul(2)\n" in fixed and analyze_source(fixed).diagnostics == []
    suppress = await client.code_action_resolve_async(listed[1])
    (change,) = suppress.edit.document_changes
    assert apply_edits(TRAIN, change.edits).splitlines()[5] == "    y.mul_(2)  # gradguard: ignore[GG001]"


@pytest.mark.resolve
async def test_fix_all_is_made_on_resolve(client: LanguageClient):
    found = _fixable_fixture()
    if found is None:
        pytest.skip("no rule offers an automatic fix yet")
    from gradguard.autofix.writer import fix_text

    text, _ = found
    open_doc(client, text)
    await wait_publish(client, URI, version=1)
    (action,) = await actions_for(client, [], ["source.fixAll"])
    assert action.kind == "source.fixAll.gradguard" and action.edit is None
    assert action.data == {"uri": URI, "version": 1, "action": "fixAll"}
    resolved = await client.code_action_resolve_async(action)
    (change,) = resolved.edit.document_changes
    assert change.text_document.version == 1
    assert apply_edits(text, change.edits) == fix_text(text, "t.py").fixed  # the planner `--fix` uses


@pytest.mark.resolve
async def test_stale_action_resolves_to_no_edit(client: LanguageClient):
    open_doc(client, LEAF)
    diags = await wait_publish(client, URI, version=1)
    listed = await actions_for(client, diags, None)
    assert listed
    change_range(client, rng(0, 0, 0, 0), "# moved down\n", version=2)
    await wait_publish(client, URI, version=2)
    for action in listed:
        assert (await client.code_action_resolve_async(action)).edit is None
    closed = listed[0]
    closed.data = {**closed.data, "uri": "file:///not/open.py"}
    assert (await client.code_action_resolve_async(closed)).edit is None
    junk = types.CodeAction(title="x", data="not ours")
    assert (await client.code_action_resolve_async(junk)).edit is None


async def test_a_client_without_resolve_gets_edits_at_once(client: LanguageClient):
    open_doc(client, LEAF)
    diags = await wait_publish(client, URI, version=1)
    listed = await actions_for(client, diags, None)
    assert listed and all(a.edit is not None for a in listed)


@pytest.mark.resolve
async def test_fix_resolves_when_the_client_sends_back_a_rebuilt_range(client: LanguageClient):
    """Neovim 0.7 keeps diagnostics in byte columns and sends back a range rebuilt from them (off in a line
    with non-ASCII text): the fix is found by gradguard's own position in ``data``, not by that range."""
    open_doc(client, TRAIN)
    (d,) = await wait_publish(client, URI, version=1)
    shifted = types.Diagnostic(range=rng(5, 6, 5, 15), message=d.message, severity=d.severity, code=d.code,
                               source=d.source, data=d.data)
    (fix, _) = await actions_for(client, [shifted], [types.CodeActionKind.QuickFix])
    resolved = await client.code_action_resolve_async(fix)
    assert "    y = y.mul(2)\n" in apply_edits(TRAIN, resolved.edit.document_changes[0].edits)
