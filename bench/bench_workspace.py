"""Workspace diagnostics through the language server against ``gradguard check`` on the same folder.

    python bench/bench_workspace.py FOLDER [--runs 3]

Each run, with the result cache off (``GRADGUARD_NO_CACHE=1``): a fresh ``python -m gradguard.lsp`` in
``"diagnosticMode": "workspace"`` answers one ``workspace/diagnostic`` (timed from the request to the answer,
after initialize), and ``python -m gradguard check --no-progress --exit-zero .`` in FOLDER (timed as a whole
process).  Then once each with the cache on (``GRADGUARD_CACHE_DIR`` in a temporary folder): the check fills
it, and the server's pull is timed with every entry there.  Also timed: a second pull with the first's
result ids (nothing changed), what an editor's periodic workspace pull costs.  Prints the times and the files and findings each
reported.  Point it at a copy: FOLDER is where ``.gradguard_cache`` would go without ``GRADGUARD_CACHE_DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient


async def pull(folder: Path, env: dict[str, str]) -> tuple[float, int, int, float]:
    client = LanguageClient("bench", "1")
    await client.start_io(sys.executable, "-m", "gradguard.lsp", env=env)
    caps = types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(diagnostic=types.DiagnosticClientCapabilities()),
        window=types.WindowClientCapabilities(work_done_progress=False))
    await client.initialize_async(types.InitializeParams(
        capabilities=caps, root_uri=folder.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=folder.as_uri(), name=folder.name)],
        initialization_options={"diagnosticMode": "workspace"}))
    client.initialized(types.InitializedParams())
    start = time.perf_counter()
    report = await client.workspace_diagnostic_async(types.WorkspaceDiagnosticParams(previous_result_ids=[]))
    elapsed = time.perf_counter() - start
    start = time.perf_counter()  # what an editor's next poll costs when nothing changed: unchanged reports
    await client.workspace_diagnostic_async(types.WorkspaceDiagnosticParams(previous_result_ids=[
        types.PreviousResultId(uri=r.uri, value=r.result_id) for r in report.items if r.result_id]))
    repoll = time.perf_counter() - start
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return elapsed, len(report.items), sum(len(r.items) for r in report.items), repoll


def check(folder: Path, env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gradguard", "check", "--no-progress", "--exit-zero", "--format",
                           "json", "."], env=env, cwd=folder, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, len(json.loads(done.stdout)["diagnostics"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    folder = args.folder.resolve()
    cold = {**os.environ, "GRADGUARD_NO_CACHE": "1"}
    for _ in range(args.runs):
        lsp_time, files, lsp_findings, repoll = asyncio.run(pull(folder, cold))
        cli_time, cli_findings = check(folder, cold)
        print(f"cold: lsp workspace/diagnostic {lsp_time:.2f} s ({files} files, {lsp_findings} findings); "
              f"gradguard check {cli_time:.2f} s ({cli_findings} findings); lsp re-poll, nothing changed {repoll:.2f} s")
    with tempfile.TemporaryDirectory() as cache:
        warm = {**os.environ, "GRADGUARD_CACHE_DIR": cache}
        warm.pop("GRADGUARD_NO_CACHE", None)
        check(folder, warm)
        cli_time, _ = check(folder, warm)
        lsp_time, files, _, _ = asyncio.run(pull(folder, warm))
        print(f"warm cache: lsp workspace/diagnostic {lsp_time:.2f} s; gradguard check {cli_time:.2f} s")


if __name__ == "__main__":
    main()
