"""The runtime probe in the language server: ``gradguard.probe`` command, "Confirm with probe" code lens,
opt-in probe on save; the probe's result is merged into the document's diagnostics.

Settings (``initializationOptions`` / ``workspace/didChangeConfiguration``, beside ``"gradguard"``, as
the VS Code client sends them)::

    {"gradguard": {...}, "probe": {"enable": bool, "device": "cpu"|"cuda"|"auto", "timeout": seconds,
                                   "entry": "run", "onSave": bool}, "trusted": bool}

- The probe runs the user's code, so it runs only when ``probe.enable`` is true AND the client does not
  say the workspace is untrusted (``"trusted": false`` always refuses, and sticks until a push says
  ``"trusted": true``; a client that sends no ``trusted`` must set ``probe.enable`` explicitly).  These settings come only from the client, never
  from the workspace's ``pyproject.toml``.  Off by default.
- ``enable`` also probes a ``.py`` document each time it is saved (``"onSave": false`` keeps only the
  command and the code lens).
- The probe runs the file on disk: a document with unsaved changes is refused.  ``entry`` (setting, or
  the command's ``{"uri": ..., "entry": "run"}``) imports the file and calls that function instead of
  running it as ``__main__`` (``gradguard probe --entry``).
- It runs in a single background thread over one warm sandboxed worker (``probe.ProbeWorker``), never
  on the event loop; one probe per document at a time (a save during a run probes once more after it);
  a result is dropped when the document changed while it ran.
- Merged as ``gradguard check --probe`` merges (``probe.merge``): confirmed findings are raised to error,
  their message says so and ``data.confirmed`` is true; findings only the probe saw are added with
  source ``gradguard-probe``; a result applies only while the document's text is the one probed.

What belongs to one document (its result, a run in flight, a save during it) is the ``TextDocument``'s
(``documents.py``); ``ProbeSupport`` keeps what is the server's: the settings, the warm worker and its thread.
It needs of the server only what ``ProbeServer`` says.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Protocol

from lsprotocol import types
from pygls.workspace import Workspace

from ..diagnostics import Diagnostic
from ..probe import merge as probe_merge
from ..probe import model as probe_model
from ..probe.merge import ProbedDiagnostic
from ..probe.model import ProbeOptions, ProbeResult
from ..probe.runner import ProbeWorker, probe_file
from ..probed_fixes import fixes_for
from .convert import PROBE_SOURCE
from .documents import Document, Probed, TextDocument

logger = logging.getLogger("gradguard.lsp.probe")

PROBE_COMMAND = "gradguard.probe"
LENS_TITLE = "Confirm with probe"
DEFAULT_TIMEOUT_S = 10.0  # the VS Code client's default (gradguard.probe.timeout)
MAX_TIMEOUT_S = 86_400.0  # as the CLI's --timeout (1e12 overflowed the event loop's poll)

UNTRUSTED = ("the workspace is not trusted: the runtime probe runs this file's code, so it only runs in a "
             "trusted workspace")
DISABLED = ('the runtime probe is off: it runs this file\'s code, so it must be enabled explicitly '
            '(setting "probe": {"enable": true}; gradguard.probe.enable in VS Code)')


@dataclass(frozen=True)
class ProbeSettings:
    enable: bool = False
    on_save: bool = True
    device: str = "cpu"
    timeout: float = DEFAULT_TIMEOUT_S
    entry: str | None = None
    trusted: bool | None = None  # None: the client said nothing about trust

    def refusal(self) -> str | None:
        """Why the probe may not run, or None when it may."""
        if self.trusted is False:
            return UNTRUSTED
        if self.enable is not True:
            return DISABLED
        return None


def parse_settings(options: Any) -> tuple[ProbeSettings, list[str]]:
    """``ProbeSettings`` from a settings object (keys absent: defaults, i.e. off), and warnings."""
    if not isinstance(options, dict):
        return ProbeSettings(), []
    warnings: list[str] = []
    probe = options.get("probe")
    if probe is None:
        probe = {}
    if not isinstance(probe, dict):
        return ProbeSettings(), ['"probe" must be an object like {"enable": true}; the probe is off']
    trusted = options.get("trusted")
    if trusted is not None and not isinstance(trusted, bool):
        warnings.append(f'"trusted" must be true or false, not {trusted!r}; treating the workspace as untrusted')
        trusted = False
    device = probe.get("device", "cpu")
    if device not in probe_model.DEVICES:
        warnings.append(f'"probe.device" must be one of {", ".join(probe_model.DEVICES)}, not {device!r}; using cpu')
        device = "cpu"
    timeout = probe.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT_S:
        warnings.append(f'"probe.timeout" must be a number of seconds above 0 and at most a day, not {timeout!r}; '
                        f'using {DEFAULT_TIMEOUT_S:g}')
        timeout = DEFAULT_TIMEOUT_S
    entry = probe.get("entry")
    if entry is not None and (not isinstance(entry, str) or not entry.strip()):
        warnings.append(f'"probe.entry" must be a function name, not {entry!r}; running files as __main__')
        entry = None
    return ProbeSettings(enable=probe.get("enable") is True, on_save=probe.get("onSave", True) is not False,
                         device=device, timeout=float(timeout), entry=entry, trusted=trusted), warnings


@dataclass(frozen=True)
class ProbeOnlyDiagnostic(ProbedDiagnostic):
    """A finding only the probe saw (published with source ``gradguard-probe``)."""


class ProbeServer(Protocol):
    """What the probe needs of the language server (``server.GradguardServer`` is one)."""

    documents: dict[str, Document]
    pull_mode: bool
    refresh_support: bool

    @property
    def workspace(self) -> Workspace: ...

    @property
    def client_capabilities(self) -> types.ClientCapabilities | None: ...

    def warn(self, message: str) -> None: ...

    def path(self, uri: str) -> str: ...

    def schedule(self, document: Document, delay: float | None = None) -> None: ...

    def workspace_diagnostic_refresh(self, params: None) -> Any: ...

    def workspace_code_lens_refresh(self, params: None) -> Any: ...


class ProbeSupport:
    """The probe state of one server: settings, the warm worker and the thread it is driven from."""

    def __init__(self) -> None:
        self.settings = ProbeSettings()
        self.worker: ProbeWorker | None = None
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradguard-probe")
        self.tasks: set[asyncio.Task] = set()
        self.configured = False
        self.runs = 0  # probes actually started (the tests check that a refused one never starts)

    # ---- configuration ----------------------------------------------------------------
    def configure(self, ls: ProbeServer, options: Any) -> None:
        """New settings.  ``"trusted": false`` sticks: a later push that does not say ``trusted`` (a client
        that sends only what changed, or a settings object without it) keeps the workspace untrusted; only an
        explicit ``"trusted": true`` lifts it."""
        settings, warnings = parse_settings(options)
        for w in warnings:
            ls.warn(w)
        said = isinstance(options, dict) and options.get("trusted") is not None
        if self.settings.trusted is False and not said:
            settings = replace(settings, trusted=False)
        changed = (settings.refusal() is None) != (self.settings.refusal() is None)
        self.settings = settings
        if settings.refusal() is not None:  # no longer allowed: stop showing what it said
            for document in ls.documents.values():
                if isinstance(document, TextDocument):
                    document.probed = None
        if changed and self.configured:  # not during initialize: no request may precede its answer
            _refresh_code_lenses(ls)
        self.configured = True

    # ---- running ----------------------------------------------------------------------
    def _run(self, path: str, options: ProbeOptions) -> ProbeResult:
        """In the probe thread (one at a time): the warm worker is started on first use."""
        if self.worker is None:
            self.worker = ProbeWorker(isolate=options.isolate)
        return probe_file(path, options, worker=self.worker)

    async def probe(self, ls: ProbeServer, uri: str, entry: str | None = None, quiet: bool = False) -> dict[str, Any]:
        """Probe the document ``uri`` and update its diagnostics; a summary for the command's caller."""

        def refuse(status: str, message: str) -> dict[str, Any]:
            if not quiet:
                ls.warn(f"probe: {message}")
            return {"status": status, "ran": False, "message": message}

        why = self.settings.refusal()
        if why is not None:
            return refuse("refused", why)
        state = ls.documents.get(uri)
        if not isinstance(state, TextDocument):
            return refuse("refused", f"{PROBE_COMMAND}: pass the URI of an open document")
        path = ls.path(uri)
        if not path.endswith(".py") or not os.path.isfile(path):
            return refuse("refused", f"only a Python file saved on disk can be probed, not {uri}")
        if state.probing:
            return refuse("busy", "a probe of this document is already running")
        doc = ls.workspace.get_text_document(uri)
        text, version = doc.source, doc.version
        state.probing = True
        try:
            try:
                on_disk = (await asyncio.to_thread(Path(path).read_bytes)).decode("utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                return refuse("refused", f"cannot read {path}: {exc}")
            if on_disk != text:
                return refuse("unsaved", "save the file first: the probe runs the file on disk")
            settings = self.settings
            options = ProbeOptions(device=settings.device, timeout=settings.timeout, entry=entry or settings.entry,
                                   lines=tuple(sorted({d.line for d in state.last_good})))
            self.runs += 1
            result = await asyncio.get_running_loop().run_in_executor(self.executor, self._run, path, options)
        finally:
            state.probing = False
            if state.probe_again:
                state.probe_again = False
                self.on_save(ls, uri)
        current = ls.documents.get(uri)
        if not isinstance(current, TextDocument) or ls.workspace.get_text_document(uri).version != version \
                or ls.workspace.get_text_document(uri).source != text or self.settings.refusal() is not None:
            return {"status": "stale", "ran": True,
                    "message": "the document changed while the probe ran: its result was dropped"}
        current.probed = Probed(text, result)
        merged = self.merge(ls, current, text, list(current.last_good))
        tally = probe_merge.counts(merged, len(current.last_good))
        if (result.status in probe_model.INCOMPLETE or (result.status == probe_model.COMPLETED and not result.ops)) \
                and not quiet:
            ls.warn(f"probe: {result.status}: {result.detail}")
        _republish(ls, current)
        return {"status": result.status, "ran": True, "message": result.detail, "device": result.device,
                "seconds": round(result.total_seconds, 3), **tally}

    def on_save(self, ls: ProbeServer, uri: str) -> None:
        if self.settings.refusal() is not None or not self.settings.on_save or not uri.endswith(".py"):
            return
        document = ls.documents.get(uri)
        if isinstance(document, TextDocument) and document.probing:
            document.probe_again = True
            return
        task = asyncio.get_running_loop().create_task(self._probe_logged(ls, uri))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _probe_logged(self, ls: ProbeServer, uri: str) -> None:
        try:
            await self.probe(ls, uri, quiet=True)
        except Exception:
            logger.exception("probe of %s failed", uri)

    def merge(self, ls: ProbeServer, document: TextDocument, text: str, diags: list[Diagnostic]) -> list[Diagnostic]:
        """``diags`` (the static findings of ``text``, the text of ``document``) merged with the probe's result
        for that exact text."""
        done = document.probed
        if done is None:
            return diags
        if done.text != text:
            document.probed = None  # the document moved on: that result no longer applies
            return diags
        display = ls.path(document.uri)
        static = {(d.span, d.code) for d in diags}
        out: list[Diagnostic] = []
        for d in probe_merge.merge(diags, done.result, display):
            # related locations in other files cannot be shown as this document's positions
            related = tuple(r for r in d.related if r.path == display)
            if related != d.related:
                d = replace(d, related=related)
            if isinstance(d, ProbedDiagnostic) and (d.span, d.code) not in static:
                d = ProbeOnlyDiagnostic(**{f.name: getattr(d, f.name) for f in fields(ProbedDiagnostic)})
            out.append(d)
        # The findings only the probe made carry their fixes as ``check --probe`` gives them (code actions show them).
        asked = [d for d in out if isinstance(d, ProbeOnlyDiagnostic) and d.probe is not None and d.fix is None
                 and d.path == display]
        built = fixes_for(text, display, asked) if asked else {}
        return [d.with_fix(built.get(id(d))) for d in out] if built else out

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        worker, self.worker = self.worker, None
        if worker is not None:  # closing waits for a probe in flight (bounded by its timeout): not here
            threading.Thread(target=worker.close, name="gradguard-probe-close", daemon=True).start()


def mark_sources(pairs: list[tuple[Diagnostic, types.Diagnostic]]) -> None:
    for d, lsp in pairs:
        if isinstance(d, ProbeOnlyDiagnostic):
            lsp.source = PROBE_SOURCE


def _republish(ls: ProbeServer, document: TextDocument) -> None:
    document.revision += 1  # a pulling client's previous result id no longer matches
    if not ls.pull_mode:
        ls.schedule(document, delay=0)
    elif ls.refresh_support:
        try:
            ls.workspace_diagnostic_refresh(None)
        except Exception:  # pragma: no cover
            logger.exception("workspace/diagnostic/refresh failed")


def _refresh_code_lenses(ls: Any) -> None:
    caps = ls.client_capabilities
    lens = caps.workspace.code_lens if caps is not None and caps.workspace is not None else None
    if lens is not None and lens.refresh_support:
        try:
            ls.workspace_code_lens_refresh(None)
        except Exception:  # pragma: no cover
            logger.exception("workspace/codeLens/refresh failed")


def register(server: Any) -> None:
    """Register the command and the code lens on ``server``."""

    @server.command(PROBE_COMMAND)
    async def probe_command(ls: Any, *args: Any) -> dict[str, Any]:
        """``gradguard.probe`` with ``uri`` or ``{"uri": ..., "entry": ...}``: probe that document now."""
        target = args[0] if args else None
        entry = None
        if isinstance(target, dict):
            entry = target.get("entry") if isinstance(target.get("entry"), str) else None
            target = target.get("uri")
        try:
            return await ls.probe.probe(ls, target if isinstance(target, str) else "", entry=entry)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("%s failed", PROBE_COMMAND)
            return {"status": "failed", "ran": False, "message": f"internal error: {exc!r}"}

    @server.feature(types.TEXT_DOCUMENT_CODE_LENS, types.CodeLensOptions(resolve_provider=False))
    def code_lens(ls: Any, params: types.CodeLensParams) -> list[types.CodeLens]:
        try:
            uri = params.text_document.uri
            if ls.probe.settings.refusal() is not None or not isinstance(ls.documents.get(uri), TextDocument) or not uri.endswith(".py"):
                return []
            start = types.Position(line=0, character=0)
            return [types.CodeLens(range=types.Range(start=start, end=start),
                                   command=types.Command(title=LENS_TITLE, command=PROBE_COMMAND, arguments=[uri]))]
        except Exception:
            logger.exception("code lens failed")
            return []
