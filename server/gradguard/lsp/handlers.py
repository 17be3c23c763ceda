"""The LSP handlers of text documents, configuration, pull diagnostics, hover and code actions: each one line or
a few over ``GradguardServer``'s one analysis path (notebooks: ``notebooks.py``; the probe: ``probe_support``).

Every handler is wrapped by ``safe()``: an exception is logged and a default answered, never the server killed.
Code actions, fix-all and hover are the fix layer's (``actions.py``, ``hover.py``), loaded on first use
(``on_demand.py``).  Fixes need libcst: without it the server says so once (a warning when the fix layer is
loaded, just after the first findings are out) and offers no fix actions.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Callable

from lsprotocol import types

from .convert import FIX_ALL_KIND, NOTEBOOK_FIX_ALL_KIND
from .documents import TextDocument, key_of
from .on_demand import FIX_LAYER
from .settings import BESIDE, CONFIG_KEYS
from .server import GradguardServer

logger = logging.getLogger("gradguard.lsp")

FIX_ALL_COMMAND = "gradguard.applyAllFixes"
PYPROJECT_GLOB = "**/pyproject.toml"


def safe(default: Any = None) -> Callable:
    """Log any exception of a handler and return ``default``: a handler never kills the server."""

    def wrap(fn: Callable) -> Callable:
        if asyncio.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any) -> Any:
                try:
                    return await fn(*args)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    logger.exception("%s failed", fn.__name__)
                    return default

            return run_async

        @functools.wraps(fn)
        def run(*args: Any) -> Any:
            try:
                return fn(*args)
            except Exception:
                logger.exception("%s failed", fn.__name__)
                return default

        return run

    return wrap


def _can_pull_configuration(ls: GradguardServer) -> bool:
    caps = ls.client_capabilities
    return bool(caps is not None and caps.workspace is not None and caps.workspace.configuration)


def _stale(ls: GradguardServer, edit: types.WorkspaceEdit) -> bool:
    """Whether a part ``edit`` is versioned for has another version now (the client would refuse it too)."""
    for change in edit.document_changes or ():
        named = getattr(change, "text_document", None)
        if named is not None and named.version is not None \
                and ls.workspace.get_text_document(named.uri).version != named.version:
            return True
    return False


def register(server: GradguardServer) -> None:  # noqa: C901 - one short handler per LSP method
    # ---- lifecycle and configuration ---------------------------------------------------------
    @server.feature(types.INITIALIZE)
    @safe()
    def initialize(ls: GradguardServer, params: types.InitializeParams) -> None:
        ls.set_client_capabilities(params.capabilities)
        ls.load_settings(params.initialization_options)
        ls.set_run(params.initialization_options)

    @server.feature(types.INITIALIZED)
    @safe()
    async def initialized(ls: GradguardServer, params: types.InitializedParams) -> None:
        ls.workspace_diagnostics.changed(ls)  # workspace mode, client that cannot pull: push the closed files
        if ls.can_watch_files():
            watchers = [types.FileSystemWatcher(glob_pattern=PYPROJECT_GLOB)]
            await ls.client_register_capability_async(types.RegistrationParams(registrations=[types.Registration(
                id="gradguard-pyproject-watcher", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=watchers))]))

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    @safe()
    def did_change_watched_files(ls: GradguardServer, params: types.DidChangeWatchedFilesParams) -> None:
        if any(c.uri.rsplit("/", 1)[-1] == "pyproject.toml" for c in params.changes):
            ls.reload_settings()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    @safe()
    async def did_change_configuration(ls: GradguardServer, params: types.DidChangeConfigurationParams) -> None:
        """Settings pushed as ``{"gradguard": {...}, "probe": ..., ...}``; pushed flat (the inner table, with
        the options beside it mixed in); or not pushed at all (``null``, ``{}``: the LSP way of saying "ask
        me"), then pulled with ``workspace/configuration`` (section ``gradguard``: the inner table) when the
        client can answer it, else the pyproject.toml is read again under the settings already given."""
        settings = params.settings
        if isinstance(settings, dict) and "gradguard" in settings:
            ls.set_run(settings)
            ls.load_settings(settings["gradguard"])
        elif isinstance(settings, dict) and set(settings) & (CONFIG_KEYS | BESIDE):
            ls.set_run(settings)
            ls.load_settings({k: v for k, v in settings.items() if k not in BESIDE})
        elif _can_pull_configuration(ls):
            answer = await ls.workspace_configuration_async(types.ConfigurationParams(
                items=[types.ConfigurationItem(section="gradguard")]))
            pulled = answer[0] if isinstance(answer, (list, tuple)) and answer else None
            if isinstance(pulled, dict):
                ls.load_settings({k: v for k, v in pulled.items() if k not in BESIDE})
            else:
                ls.load_settings(ls.settings.overrides)
        else:
            ls.load_settings(ls.settings.overrides)
        ls.reanalyse_all()

    @server.feature(types.SHUTDOWN)
    @safe()
    def shutdown(ls: GradguardServer, params: Any = None) -> None:
        ls.shutdown_work()

    # ---- text synchronisation -------------------------------------------------------------
    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    @safe()
    def did_open(ls: GradguardServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.reload_if_pyproject_changed()
        ls.schedule(ls.open_text(params.text_document.uri), delay=0)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    @safe()
    def did_change(ls: GradguardServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.reload_if_pyproject_changed()
        document = ls.documents.get(params.text_document.uri)
        if isinstance(document, TextDocument):
            document.changed(ls.workspace.get_text_document(document.uri).source, params.content_changes)
            if ls.run_on_type:
                ls.schedule(document)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    @safe()
    def did_save(ls: GradguardServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.reload_if_pyproject_changed()  # also a pyproject.toml saved in an editor that sends it to us
        document = ls.documents.get(params.text_document.uri)
        if document is not None:
            ls.schedule(document, delay=0)
            ls.probe.on_save(ls, document.uri)  # only when enabled and trusted

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    @safe()
    def did_close(ls: GradguardServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.close(params.text_document.uri)

    # ---- pull diagnostics --------------------------------------------------------------------
    options = types.DiagnosticOptions(identifier="gradguard", inter_file_dependencies=False, workspace_diagnostics=False)

    @server.feature(types.TEXT_DOCUMENT_DIAGNOSTIC, options)
    @safe(default=types.RelatedFullDocumentDiagnosticReport(items=[]))
    async def pull_diagnostics(
        ls: GradguardServer, params: types.DocumentDiagnosticParams
    ) -> types.RelatedFullDocumentDiagnosticReport | types.RelatedUnchangedDocumentDiagnosticReport:
        uri = params.text_document.uri
        ls.reload_if_pyproject_changed()
        document = ls.documents.get(uri)
        if not isinstance(document, TextDocument):  # notebook cells are pushed
            return types.RelatedFullDocumentDiagnosticReport(items=[])
        version = ls.workspace.get_text_document(uri).version
        result_id = ls.result_id(document, version)
        if params.previous_result_id == result_id and document.published_version == version:
            return types.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)  # nothing analysed or sent
        for _ in range(5):  # the text or configuration may change while it is analysed: answer for the newest
            before = ls.result_id(document, ls.workspace.get_text_document(uri).version)
            outcome = await ls.analyse(document)
            if outcome is None:
                return types.RelatedFullDocumentDiagnosticReport(items=[])
            now = ls.result_id(document, ls.workspace.get_text_document(uri).version)
            if now == before == ls.result_id(document, outcome[0].version):
                break
        else:
            before = None  # still moving: an id that would claim these items are current is not given
        snap, diags = outcome
        items = [lsp for _, lsp in ls.record(document, snap, diags)[uri]]
        ls.release_after_reply(document)
        return types.RelatedFullDocumentDiagnosticReport(items=items, result_id=before)

    # ---- hover and code actions -------------------------------------------------------------
    @server.feature(types.TEXT_DOCUMENT_HOVER)
    @safe()
    async def hover(ls: GradguardServer, params: types.HoverParams) -> types.Hover | None:
        document = ls.document_of(params.text_document.uri)
        if document is None:
            return None
        uri = params.text_document.uri
        hits = document.shown_at(uri, params.position)
        if not hits:
            return None
        _, hover_text = await ls.on_demand.load(FIX_LAYER)
        built = await ls.fixes_of(document, uri, [key_of(d) for d, _ in hits])
        doc = ls.workspace.get_text_document(uri)  # after the fixes were built: the text is the newest
        return hover_text.hover([(d, lsp, built.get(key_of(d), hover_text.UNKNOWN)) for d, lsp in hits], ls.client_capabilities,
                                ls.config.docs_url, uri, doc.source, doc.version)

    kinds = [types.CodeActionKind.QuickFix, FIX_ALL_KIND, NOTEBOOK_FIX_ALL_KIND]
    action_options = types.CodeActionOptions(code_action_kinds=kinds, resolve_provider=True)

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, action_options)
    @safe(default=[])
    async def code_action(ls: GradguardServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        actions, _ = await ls.on_demand.load(FIX_LAYER)
        return await actions.code_actions(ls, params)

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def code_action_resolve(ls: GradguardServer, params: types.CodeAction) -> types.CodeAction:
        try:
            actions, _ = await ls.on_demand.load(FIX_LAYER)
            return await actions.resolve(ls, params)
        except asyncio.CancelledError:
            raise
        except Exception:  # the action as it came, without an edit: never a wrong one
            logger.exception("codeAction/resolve failed")
            return params

    @server.command(FIX_ALL_COMMAND)
    @safe(default={"applied": False, "fixes": 0})
    async def apply_all_fixes(ls: GradguardServer, *args: Any) -> dict[str, Any]:
        """``gradguard.applyAllFixes`` with argument ``uri`` (or ``{"uri": ...}``): apply every safe fix.

        Sends one ``workspace/applyEdit``; returns ``{"applied": bool, "fixes": n, "skipped": m}``.
        """
        target = args[0] if args else None
        if isinstance(target, dict):
            target = target.get("uri")
        if not isinstance(target, str) or ls.document_of(target) is None:
            ls.warn(f"{FIX_ALL_COMMAND}: pass the URI of an open document")
            return {"applied": False, "fixes": 0, "skipped": 0}
        actions, _ = await ls.on_demand.load(FIX_LAYER)
        edit, done = await actions.fix_all_edit(ls, target)
        skipped = actions.fixes.left_over(done) if done is not None else 0
        if edit is None:
            return {"applied": False, "fixes": 0, "skipped": skipped}
        if _stale(ls, edit):  # edited while the fixes were planned: the edit is of an older text
            ls.warn(f"{FIX_ALL_COMMAND}: the document changed while fixing; nothing applied (run it again)")
            return {"applied": False, "fixes": 0, "skipped": skipped, "changed": True}
        response = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label=actions.FIX_ALL_TITLE))
        applied = bool(getattr(response, "applied", False))
        return {"applied": applied, "fixes": len(done.applied) if applied else 0, "skipped": skipped}
