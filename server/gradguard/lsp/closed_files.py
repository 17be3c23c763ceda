"""The files of the workspace folders as they are on disk, for workspace mode (``workspace.py``): which ones
(the CLI's ``files.discover``, so ``exclude``, ``.gitignore`` and the skipped folders are honoured as by
``gradguard check FOLDER``), analysed in worker processes behind the CLI's result cache (``batch``), and their
findings as LSP diagnostics.

Worker processes come from a ``forkserver`` (a fork of the server itself would copy its threads' locks), kept
for the server's life; where processes cannot start, the server's analysis threads do the work.  The display
name of a file is its path relative to its workspace folder, as ``gradguard check .`` run there names it, so
the two share cache entries.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path

from lsprotocol import types

from .. import batch, parsing
from ..config import Config
from ..diagnostics import Diagnostic, FileResult
from ..files import MissingPath, Target, discover
from ..notebooks import is_notebook
from ..result_cache import ResultCache, open_cache
from ..text import split_lines
from . import convert
from .folders import pyproject_in
from .settings import Stamp

logger = logging.getLogger("gradguard.lsp")


@dataclass(frozen=True)
class Found:
    """A file of a workspace folder, the pyproject.toml that configures it and its (mtime, size, inode)."""

    folder: Path
    target: Target
    pyproject: Path | None
    stamp: Stamp | None


def survey(folders: dict[Path, Config]) -> list[Found]:
    """Every source file of the folders (each with the configuration whose ``exclude`` applies to it), once:
    a file in nested folders belongs to the innermost.  Blocking: run it in a thread."""
    found: dict[Path, Found] = {}
    for folder in sorted(folders, key=lambda f: len(f.parts)):
        try:
            targets = discover([str(folder)], folders[folder], cwd=folder)
        except MissingPath:
            continue  # a folder deleted since it was added
        for target in targets:
            try:
                st = target.path.stat()
            except OSError:
                continue
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            found[target.path] = Found(folder, target, pyproject_in(target.path, folder), stamp)
    return sorted(found.values(), key=lambda f: str(f.target.path))


class Pool:
    """Worker processes for closed files, started on first use."""

    def __init__(self, threads: Executor, jobs: int | None = None) -> None:
        self.threads = threads  # the fallback where processes cannot run
        self.jobs = jobs or os.cpu_count() or 1
        self.processes: ProcessPoolExecutor | None = None
        self.broken = False

    def _processes(self) -> ProcessPoolExecutor | None:
        if self.processes is None and not self.broken:
            try:
                context = multiprocessing.get_context("forkserver")
                context.set_forkserver_preload(["gradguard.batch"])
                self.processes = ProcessPoolExecutor(max_workers=self.jobs, mp_context=context)
            except (OSError, ValueError, NotImplementedError):
                self.broken = True
        return self.processes

    async def run(self, chunk: list[batch.Pair], config: Config) -> tuple[list[FileResult], list[str], dict[str, str]]:
        loop = asyncio.get_running_loop()
        processes = self._processes()
        if processes is not None:
            try:
                return await asyncio.wrap_future(processes.submit(batch.analyze_chunk, chunk, config))
            except (OSError, BrokenProcessPool, RuntimeError):
                logger.warning("worker processes cannot run here; analysing in threads")
                self.broken, self.processes = True, None
        return await loop.run_in_executor(self.threads, batch.analyze_chunk, chunk, config)

    def shutdown(self) -> None:
        if self.processes is not None:
            self.processes.shutdown(wait=False, cancel_futures=True)
            self.processes = None


async def analyse(pool: Pool, found: list[Found], config: Config, progress: Callable[[int], None]
                  ) -> tuple[dict[Path, FileResult], dict[Path, str]]:
    """The findings of ``found`` (all configured by ``config``) as they are on disk, and the internal errors of
    those that could not be analysed.  At most ``pool.jobs`` chunks are in flight: cancelling stops the rest."""
    loop = asyncio.get_running_loop()
    analysis = replace(config, baseline=None)  # the cache holds every finding; the baseline applies below
    targets = [f.target for f in found]
    cache: ResultCache | None = await loop.run_in_executor(None, open_cache, analysis, found[0].folder)
    done: list[FileResult] = []
    misses = targets
    if cache is not None:
        done, misses = await loop.run_in_executor(None, batch.split_cached, targets, cache)
        progress(len(done))
    by_display = {t.display: t.path for t in targets}
    pending = batch.chunks([(str(t.path), t.display) for t in misses], pool.jobs)
    running: set[asyncio.Task] = set()
    crashes: dict[Path, str] = {}
    try:
        while pending or running:
            while pending and len(running) < pool.jobs:
                chunk = pending.pop()
                running.add(asyncio.ensure_future(pool.run(chunk, analysis)))
            finished, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in finished:
                results, failed, digests = task.result()
                if cache is not None:  # each under the key of the bytes it is the analysis of
                    await loop.run_in_executor(None, _put, cache, results, digests)
                done += results
                for message in failed:
                    display = message.removeprefix("internal error while analysing ").split(": ", 1)[0]
                    crashes[by_display.get(display, Path(display))] = message
                progress(len(results) + len(failed))
    finally:
        for task in running:
            task.cancel()
    out = {by_display.get(r.path, Path(r.path)): r for r in done}
    if config.baseline is not None:
        out = {path: replace(r, diagnostics=config.baseline.split(path, r.diagnostics)[0]) for path, r in out.items()}
    return out, crashes


def _put(cache: ResultCache, results: Iterable[FileResult], digests: dict[str, str]) -> None:
    for result in results:
        cache.put(result, digests.get(result.path, ""))  # "": unread, so never stored


def to_lsp(path: Path, uri: str, diagnostics: list[Diagnostic], encoding: str, docs_url: str | None
           ) -> list[types.Diagnostic]:
    """A closed file's findings as LSP diagnostics.  Blocking (reads the file for its lines): run it in a thread.

    A notebook's findings are given at the start of the notebook file, the message starting with the cell and
    the line in it (``cell 5, line 3: ...``): positions inside the file's JSON would point at nothing a
    notebook editor shows; opened, the notebook's cells get their own diagnostics."""
    if not diagnostics:
        return []
    if is_notebook(path):
        return [_notebook_diagnostic(d, uri, docs_url) for d in diagnostics]
    try:
        text = parsing.decode(path.read_bytes())
    except OSError:
        text = ""
    lines = split_lines(text) if isinstance(text, str) else []
    return [convert.to_lsp_diagnostic(d, uri, lines, encoding, docs_url) for d in diagnostics]


def _where(cell: int | None, line: int) -> str:
    return f"cell {cell}, line {line}" if cell is not None else f"line {line}"


def _notebook_diagnostic(d: Diagnostic, uri: str, docs_url: str | None) -> types.Diagnostic:
    lsp = convert.to_lsp_diagnostic(replace(d, related=()), uri, [], None, docs_url)
    lsp.message = f"{_where(d.cell, d.line)}: {d.message}"
    start = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0))
    lsp.related_information = [types.DiagnosticRelatedInformation(
        location=types.Location(uri=uri, range=start), message=f"{_where(r.cell, r.line)}: {r.message}")
        for r in d.related] or None
    return lsp


def crash_diagnostic(message: str) -> types.Diagnostic:
    """A file whose analysis failed is never shown as clean."""
    start = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0))
    return types.Diagnostic(range=start, message=f"{message}; nothing in this file was checked",
                            severity=types.DiagnosticSeverity.Error, source=convert.SOURCE)
