"""Editing latency as Neovim 0.11's built-in LSP client sees it, against `gradguard lsp` from this checkout.

    python bench/bench_neovim.py [--lines 3000] [--edits 30] [--runs 1] [--server-debounce-ms 0]
                                 [--client-debounce-ms N] [--nvim PATH]

Headless Neovim opens a file of ``--lines`` lines of fixture code (``bench_lsp.generate``), waits for its
first diagnostics, then inserts and deletes a comment line inside a function near the middle of the file,
``--edits`` times, each time waiting for the diagnostics of the new buffer version.  Per edit, timed inside
Neovim (``bench_neovim.lua``):

- didChange -> diagnostics: from ``LspNotify`` of the didChange to the return of Neovim's handler of the
  diagnostics for that version (0.11 pulls them with textDocument/diagnostic right after the didChange; a
  publishDiagnostics of that version counts too): the server's work, the pipe both ways, Neovim's handling;
- edit -> diagnostics: from the buffer change, so it also holds the client's own didChange debounce
  (``debounce_text_changes``, 150 ms unless ``--client-debounce-ms``; Neovim sends at once when its last
  didChange is older than that, which is the case here whenever the previous answer took longer).

The server's debounce is 0 by default (GRADGUARD_LSP_DEBOUNCE_MS), as in ``bench_lsp.py``, so the first figure
compares with its "warm line edit"; pass ``--server-debounce-ms 75`` for the shipped setting.  The first
``--warm`` edits are left out of the percentiles.  Neovim 0.11 is found as tests/editors/clients.py finds it
(``$GRADGUARD_NVIM_011``, ``.editors/nvim-0.11/bin/nvim``, ``nvim``; scripts/setup-editors.sh installs it).
Neovim and the server write their state into a temporary folder, not into ``~``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_lsp import edit_lines, generate, percentile

ROOT = Path(__file__).resolve().parent.parent
LUA = Path(__file__).resolve().with_suffix(".lua")


def find_nvim(explicit: str | None) -> str:
    candidates = [explicit, os.environ.get("GRADGUARD_NVIM_011"), str(ROOT / ".editors" / "nvim-0.11" / "bin" / "nvim"),
                  "nvim"]
    for candidate in filter(None, candidates):
        binary = shutil.which(candidate)
        if binary is None:
            continue
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL).stdout
        if out.startswith("NVIM v0.11."):
            return binary
    sys.exit("bench_neovim: no Neovim 0.11 found ($GRADGUARD_NVIM_011, .editors/nvim-0.11/bin/nvim, nvim on PATH); "
             "run scripts/setup-editors.sh or pass --nvim")


def run_once(nvim: str, lines: int, edits: int, server_debounce_ms: int, client_debounce_ms: int | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="gg-bench-nvim-") as tmp:
        home = Path(tmp)
        project = home / "project"
        project.mkdir()
        (project / "pyproject.toml").write_text('[project]\nname = "bench"\nversion = "0"\n', encoding="utf-8")
        text = generate(lines)
        path = project / "bench.py"
        path.write_text(text, encoding="utf-8")
        dirs = {name: home / name.lower() for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME",
                                                        "XDG_STATE_HOME", "TMPDIR")}
        for folder in dirs.values():
            folder.mkdir()
        report = home / "report.json"
        env = {
            **os.environ,
            **{k: str(v) for k, v in dirs.items()},
            "HOME": str(home),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "server"), os.environ.get("PYTHONPATH")])),
            "GRADGUARD_LSP_DEBOUNCE_MS": str(server_debounce_ms),
            "GG_SERVER_CMD": json.dumps([sys.executable, "-m", "gradguard.lsp"]),
            "GG_SPOTS": json.dumps(edit_lines(text, max(1, edits // 2))),
            "GG_EDITS": str(edits),
            "GG_CLIENT_DEBOUNCE_MS": "" if client_debounce_ms is None else str(client_debounce_ms),
            "GG_REPORT": str(report),
        }
        argv = [nvim, "--headless", "-u", "NONE", "-i", "NONE", "-n", "-c", f"luafile {LUA}", str(path)]
        proc = subprocess.run(argv, env=env, cwd=project, capture_output=True, text=True, timeout=600,
                              stdin=subprocess.DEVNULL)
        data = json.loads(report.read_text(encoding="utf-8")) if report.exists() else {}
        if proc.returncode != 0 or not data.get("ok"):
            sys.exit(f"bench_neovim: Neovim failed (rc={proc.returncode}): {data.get('message')}\n"
                     f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}\n{data.get('log', [])[-10:]}")
        return data


def ms(values: list[float], q: float) -> str:
    return f"{percentile(values, q):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--edits", type=int, default=30, help="edits timed per run (after --warm more)")
    parser.add_argument("--warm", type=int, default=4, help="edits made first and left out")
    parser.add_argument("--runs", type=int, default=1, help="Neovim sessions (fresh server each)")
    parser.add_argument("--server-debounce-ms", type=int, default=0)
    parser.add_argument("--client-debounce-ms", type=int, default=None)
    parser.add_argument("--nvim")
    args = parser.parse_args()
    nvim = find_nvim(args.nvim)
    firsts, sent, edited, debounced, missed = [], [], [], [], 0
    version = debounce = None
    for _ in range(args.runs):
        data = run_once(nvim, args.lines, args.edits + args.warm, args.server_debounce_ms, args.client_debounce_ms)
        version, debounce = data["nvim"], data.get("debounce_text_changes")
        firsts.append(data["first_ms"])
        for edit in data["edits"][args.warm:]:
            if edit.get("missed"):
                missed += 1
                continue
            if isinstance(edit.get("sent_to_shown_ms"), (int, float)):
                sent.append(edit["sent_to_shown_ms"])
            edited.append(edit["edit_to_shown_ms"])
            if isinstance(edit.get("edit_to_sent_ms"), (int, float)):
                debounced.append(edit["edit_to_sent_ms"])
    print(f"Neovim {version}, {args.lines:,}-line file, {len(edited)} line edits timed ({args.runs} run(s), "
          f"{args.warm} warm-up edits each left out), server debounce {args.server_debounce_ms} ms, "
          f"client debounce_text_changes {'150 (default)' if debounce is None else debounce} ms; {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"didChange -> diagnostics shown: p50 {ms(sent, 0.5)} ms, p95 {ms(sent, 0.95)} ms, max {max(sent, default=0):.1f} ms")
    print(f"edit -> diagnostics shown:      p50 {ms(edited, 0.5)} ms, p95 {ms(edited, 0.95)} ms "
          f"(edit -> didChange sent: p50 {ms(debounced, 0.5)} ms)")
    print(f"first diagnostics after didOpen (a server just started): {', '.join(f'{x:.0f}' for x in firsts)} ms")
    if missed:
        print(f"{missed} edit(s) got no diagnostics for their version within the timeout")


if __name__ == "__main__":
    main()
