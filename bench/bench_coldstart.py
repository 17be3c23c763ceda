"""Cold start of the language server: spawning ``gradguard lsp`` (the command editors run) to the first
diagnostics of a small file, over stdio with plain JSON-RPC framing.

    python bench/bench_coldstart.py [--runs 5] [--file PATH] [--code GG002] [--json FILE]

Each run spawns the server, sends ``initialize`` (a client that takes pushed diagnostics, as Neovim < 0.10 and
Emacs' eglot do), waits for its answer, sends ``initialized`` and ``didOpen`` of ``--file`` (default: a fixture
with one finding, copied to a fresh folder that is the workspace root), and times spawn -> the first
``textDocument/publishDiagnostics`` of that file holding the finding ``--code``.  Then ``shutdown`` and ``exit``.
No client library sits in the timed path: the client is this process, already running, reading the server's
pipe as bytes arrive.

Bytecode is cached (in a folder of the run) as for an installed server that has started once.

In the same run, interleaved with the server's runs (so a busy machine weighs on all of them alike), the
floor: ``python -c pass`` and ``python -c "import pygls.lsp.server"`` (spawn to exit), and for the breakdown
``python -c "import gradguard.lsp.main"``.  Medians and spread (min-max) of ``--runs`` runs of each.
With other jobs on the machine the wall times vary a lot, so each is also given as CPU time (user + system, all
threads; Linux ``/proc``, 10 ms ticks): the server's until its first diagnostics arrived, each floor's to its exit.
Printed numbers only: nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILE = ROOT / "tests" / "fixtures" / "GG002" / "pos_mask_iadd_on_leaf.py"
TIMEOUT_S = 60.0
# Every process measured runs with its bytecode cached, as an installed server after its first start: this
# sandbox sets PYTHONDONTWRITEBYTECODE, which alone made each start compile gradguard's ~90 modules (~0.25 s).
# The cache goes to a folder of this run (``measure``), not into the source tree.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def server_command() -> list[str]:
    """``gradguard lsp`` as installed next to this interpreter (what an editor's configuration names)."""
    script = Path(sys.executable).parent / "gradguard"
    return [str(script), "lsp"] if script.exists() else [sys.executable, "-m", "gradguard", "lsp"]


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Reader:
    """Messages from the server's stdout, as they arrive (the header is ``Content-Length`` only, as pygls sends)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buffer = fd, b""

    def next(self, deadline: float) -> dict:
        while True:
            head, sep, rest = self.buffer.partition(b"\r\n\r\n")
            if sep:
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                if len(rest) >= length:
                    self.buffer = rest[length:]
                    return json.loads(rest[:length])
            left = deadline - time.perf_counter()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError("the server did not answer in time")
            data = os.read(self.fd, 65536)
            if not data:
                raise EOFError("the server closed its stdout")
            self.buffer += data


TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_of(pid: int) -> float | None:
    """CPU seconds (user + system, every thread) process ``pid`` has used so far; None where /proc is not."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15 of stat)


def one_run(command: list[str], path: Path, code: str) -> dict[str, float]:
    """Seconds from spawn to: the initialize answer, and the first diagnostics of ``path`` with ``code``; and the
    server's CPU seconds by then (``cpu``, when /proc can say)."""
    uri = path.as_uri()
    text = path.read_text(encoding="utf-8")
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            cwd=path.parent, env=ENV, bufsize=0)
    deadline = start + TIMEOUT_S
    reader = Reader(proc.stdout.fileno())
    out: dict[str, float] = {}
    try:
        proc.stdin.write(frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "processId": os.getpid(), "rootUri": path.parent.as_uri(),
            "workspaceFolders": [{"uri": path.parent.as_uri(), "name": path.parent.name}],
            "capabilities": {"textDocument": {"publishDiagnostics": {"relatedInformation": True}}},
        }}))
        while "initialize" not in out:
            message = reader.next(deadline)
            if message.get("id") == 1 and "method" not in message:
                out["initialize"] = time.perf_counter() - start
                if "error" in message:
                    raise RuntimeError(f"initialize failed: {message['error']}")
        proc.stdin.write(frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        proc.stdin.write(frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
            "textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}}))
        while "diagnostics" not in out:
            message = reader.next(deadline)
            if message.get("method") == "textDocument/publishDiagnostics" and message["params"]["uri"] == uri \
                    and any(d.get("code") == code for d in message["params"]["diagnostics"]):
                out["diagnostics"] = time.perf_counter() - start
                cpu = cpu_of(proc.pid)
                if cpu is not None:
                    out["cpu"] = cpu
            elif "id" in message and "method" in message:  # a request of the server's: answer it empty
                proc.stdin.write(frame({"jsonrpc": "2.0", "id": message["id"], "result": None}))
        proc.stdin.write(frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
        while reader.next(deadline).get("id") != 2:
            pass
        proc.stdin.write(frame({"jsonrpc": "2.0", "method": "exit"}))
        proc.stdin.close()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def spawn_to_exit(args: list[str]) -> tuple[float, float]:
    """Wall seconds from spawn to exit, and the CPU seconds the process used."""
    start, cpu = time.perf_counter(), children_cpu()
    subprocess.run(args, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - start, children_cpu() - cpu


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}


def show(name: str, s: dict[str, float]) -> str:
    return (f"{name:<44} median {s['median'] * 1000:6.0f} ms   "
            f"spread {s['min'] * 1000:4.0f}-{s['max'] * 1000:4.0f} ms (n={s['runs']})")


def measure(runs: int = 5, file: Path = DEFAULT_FILE, code: str = "GG002") -> dict:
    command = server_command()
    floors = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import pygls.lsp.server'": [sys.executable, "-c", "import pygls.lsp.server"],
        "python -c 'import gradguard.lsp.main'": [sys.executable, "-c", "import gradguard.lsp.main"],
    }
    times: dict[str, list[float]] = {name: [] for name in floors}
    cpus: dict[str, list[float]] = {name: [] for name in floors}
    initialize: list[float] = []
    diagnostics: list[float] = []
    server_cpu: list[float] = []
    with tempfile.TemporaryDirectory(prefix="gradguard-coldstart-") as tmp:
        ENV["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        for args in floors.values():  # warm the OS caches and write the bytecode once, not counted
            spawn_to_exit(args)
        target = Path(tmp) / file.name
        shutil.copyfile(file, target)
        one_run(command, target, code)
        for _ in range(runs):
            got = one_run(command, target, code)
            initialize.append(got["initialize"])
            diagnostics.append(got["diagnostics"])
            if "cpu" in got:
                server_cpu.append(got["cpu"])
            for name, args in floors.items():
                wall, cpu = spawn_to_exit(args)
                times[name].append(wall)
                cpus[name].append(cpu)
    return {
        "command": " ".join(command), "file": str(file), "code": code, "load": os.getloadavg(),
        "spawn_to_diagnostics": summary(diagnostics), "spawn_to_initialize": summary(initialize),
        "floor": {name: summary(v) for name, v in times.items()},
        "server_cpu": summary(server_cpu) if server_cpu else None,
        "floor_cpu": {name: summary(v) for name, v in cpus.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE, help="a small file with one finding")
    parser.add_argument("--code", default="GG002", help="the code of the finding to wait for")
    parser.add_argument("--json", type=Path, help="also write the figures to FILE")
    args = parser.parse_args()
    result = measure(args.runs, args.file.resolve(), args.code)
    print(f"{result['command']} on {Path(result['file']).relative_to(ROOT) if Path(result['file']).is_relative_to(ROOT) else result['file']}"
          f" ({args.code}); load average {result['load'][0]:.2f}")
    print(show("spawn -> first diagnostics", result["spawn_to_diagnostics"]))
    print(show("spawn -> initialize answered", result["spawn_to_initialize"]))
    for name, s in result["floor"].items():
        print(show(f"floor: {name}", s))
    if result["server_cpu"] is not None:
        print(show("CPU: server until first diagnostics", result["server_cpu"]))
    for name, s in result["floor_cpu"].items():
        print(show(f"CPU: {name}", s))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
