"""The probe runs the user's code: it must stay in its box and always come back with a clear result.

Each test gives a script that misbehaves in one way and checks both the result and the world
outside (the listener got no connection, the files are unchanged, the stray process is gone).
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from gradguard.probe import ProbeOptions, ProbeWorker, probe_file
from gradguard.probe.sandbox import namespace_prefix

NAMESPACES = namespace_prefix() is not None
needs_namespaces = pytest.mark.skipif(not NAMESPACES, reason="no network/mount namespaces on this machine")


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# --- it ends ----------------------------------------------------------------------------------------


def test_timeout_stops_a_busy_loop_and_reports_what_it_saw(script, probe):
    path = script("""
        import torch
        x = torch.randn(3, requires_grad=True)
        y = torch.sigmoid(x)
        y.mul_(2)
        while True:
            pass
    """)
    started = time.monotonic()
    result = probe(path, timeout=2)
    assert time.monotonic() - started < 2 + 2 + 10
    assert result.status == "timeout"
    assert "2 s timeout" in result.detail
    # SIGTERM unwound the script, so the mutation seen before the timeout is still reported.
    assert [(f.code, f.site.line, f.kind) for f in result.findings] == [("GG001", 5, "pending")]


def test_timeout_kills_a_script_that_ignores_sigterm_and_its_children(script, probe):
    path = script("""
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen(["sleep", "300"])
        print(child.pid, flush=True)
        time.sleep(300)
    """)
    result = probe(path, timeout=2)
    assert result.status == "timeout"
    assert "did not stop on SIGTERM" in result.detail
    # The stdout file went with the child's temp folder; the worker killed the whole process group.  A SIGKILL
    # takes effect when the kernel next runs the process: on a busy machine its child was seen alive just after.
    deadline = time.monotonic() + 5
    while True:
        out = subprocess.run(["pgrep", "-f", "sleep 300"], capture_output=True, text=True)
        mine = [pid for pid in out.stdout.split() if _parent_is_probe(pid)]
        if not mine or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert mine == []


def _parent_is_probe(pid: str) -> bool:
    try:
        return "gradguard" in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
        return False


def test_memory_limit_turns_a_huge_allocation_into_a_clear_result(script, probe):
    path = script("""
        import torch
        big = torch.empty(16 * 2**30 // 4)  # 16 GB
        big.fill_(1)
    """)
    result = probe(path, memory_mb=4096)
    assert result.status == "memory", result.detail
    assert "4096 MB" in result.detail


def test_memory_limit_catches_python_allocations_too(script, probe):
    path = script("""
        data = bytearray(12 * 2**30)
    """)
    result = probe(path, memory_mb=4096)
    assert result.status == "memory"
    assert "MemoryError" in result.detail


def test_default_memory_limit_leaves_room_for_a_training_step(script, probe):
    path = script("""
        import torch, torch.nn as nn
        model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))
        opt = torch.optim.Adam(model.parameters())
        for _ in range(3):
            loss = model(torch.randn(512, 256)).logsumexp(1).mean()
            opt.zero_grad(); loss.backward(); opt.step()
        ballast = torch.ones(256 * 2**20)  # and 1 GB of tensors on top
    """)
    result = probe(path)
    assert result.status == "completed", result.detail
    assert result.sandbox["memory_mb"] == 6144


def test_sys_exit_is_a_result(script, probe):
    path = script("""
        import sys
        print("bye")
        sys.exit(3)
    """)
    result = probe(path)
    assert result.status == "exited"
    assert result.exit_code == 3
    assert "sys.exit(3)" in result.detail
    assert result.stdout == "bye\n"
    assert result.findings == []


def test_unrelated_exception_is_a_result_with_its_line(script, probe):
    path = script("""
        import torch

        def load():
            raise ValueError("no such dataset")

        load()
    """)
    result = probe(path)
    assert result.status == "raised"
    assert result.exception == {"type": "ValueError", "message": "no such dataset", "line": 5, "finding": False,
                                "path": str(path)}  # the file of that line (the innermost user frame)
    assert "unrelated to autograd" in result.detail
    assert result.findings == []
    assert "Traceback" in result.stderr  # the script's own traceback is in its stderr tail...


def test_cli_never_shows_a_gradguard_traceback(script, capsys):
    from gradguard.cli import main

    path = script("raise KeyError('x')\n")
    code = main(["probe", str(path)])
    captured = capsys.readouterr()
    assert code == 0
    assert "Traceback" not in captured.out + captured.err  # ...but gradguard prints none of its own
    assert "raised KeyError at line 1" in captured.err


def test_a_crash_is_a_result_and_the_worker_survives(script, probe):
    path = script("""
        import os, signal
        os.kill(os.getpid(), signal.SIGSEGV)
    """)
    result = probe(path)
    assert result.status == "crashed"
    assert "SIGSEGV" in result.detail
    fine = script("print('still here')\n", name="after.py")
    assert probe(fine).stdout == "still here\n"


def test_missing_entry_and_syntax_error_fail_clearly(script, probe):
    path = script("def main():\n    pass\n")
    result = probe(path, entry="run")
    assert result.status == "failed"
    assert "defines no 'run' to call" in result.detail
    broken = script("def run(:\n", name="broken.py")
    result = probe(broken)
    assert result.status == "failed"
    assert "not valid Python" in result.detail


# --- no network -------------------------------------------------------------------------------------


def _connections(server: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = server.accept()
        except (socket.timeout, OSError):
            return count
        conn.close()
        count += 1


def test_network_is_blocked(script, probe, listener):
    port = listener.getsockname()[1]
    path = script(f"""
        import socket
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=2)
            print("connected")
        except OSError as exc:
            print("refused:", exc)
    """)
    result = probe(path)
    assert result.status == "completed"
    assert result.stdout.startswith("refused:")
    assert any(f"127.0.0.1', {port}" in b for b in result.blocked), result.blocked
    assert _connections(listener) == 0


@needs_namespaces
def test_network_is_blocked_below_python_too(script, probe, listener):
    """A raw connect() through ctypes skips the audit hook; the network namespace still stops it."""
    port = listener.getsockname()[1]
    path = script(f"""
        import ctypes, os, socket, struct
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
        address = struct.pack("!HH4s8x", socket.AF_INET, {port}, socket.inet_aton("127.0.0.1"))
        address = struct.pack("=H", socket.AF_INET) + address[2:]
        done = libc.connect(fd, ctypes.c_char_p(address), len(address))
        print("connected" if done == 0 else "refused: " + os.strerror(ctypes.get_errno()))
    """)
    result = probe(path)
    assert result.stdout.startswith("refused:"), result.stdout
    assert result.sandbox["network_namespace"] is True
    assert _connections(listener) == 0


# --- no writes outside the temporary folder -----------------------------------------------------------


def test_writes_outside_the_temp_folder_are_blocked(script, probe, tmp_path):
    outside = Path("/tmp") / f"gradguard-probe-escape-{uuid.uuid4().hex}.txt"
    path = script(f"""
        import os, pathlib
        here = pathlib.Path(__file__)
        for target in (here.with_name("out.txt"), pathlib.Path({str(outside)!r}), here):
            try:
                with open(target, "a") as f:
                    f.write("x")
                print("wrote", target)
            except OSError as exc:
                print("blocked", target, type(exc).__name__)
        try:
            os.remove(here)
            print("removed")
        except OSError as exc:
            print("blocked remove", type(exc).__name__)
        pathlib.Path("scratch.txt").write_text("the temp working folder is writable")
        print("cwd", os.getcwd())
    """)
    before = _tree(path.parent)
    result = probe(path)
    assert result.status == "completed", result.detail
    # With a private /tmp, /tmp is the script's own (a tmpfs, gone after the run): that write stays inside.
    private = result.sandbox.get("private_tmp")
    wrote = [line for line in result.stdout.splitlines() if line.startswith("wrote")]
    assert wrote == ([f"wrote {outside}"] if private else []) and "removed" not in result.stdout, result.stdout
    assert len(result.blocked) == (3 if private else 4), result.blocked
    assert _tree(path.parent) == before
    assert not outside.exists()
    cwd = result.stdout.split("cwd ")[1].strip()
    assert not cwd.startswith(str(path.parent)) and not os.path.exists(cwd)  # a temp folder, removed after


@needs_namespaces
def test_writes_below_python_hit_a_read_only_file_system(script, probe):
    """C code (here ctypes' open(2)) skips the audit hook; the read-only mount namespace stops it."""
    path = script("""
        import ctypes, os, pathlib
        libc = ctypes.CDLL(None, use_errno=True)
        target = str(pathlib.Path(__file__).with_name("native.txt")).encode()
        fd = libc.open(target, os.O_WRONLY | os.O_CREAT, 0o644)
        print("wrote" if fd >= 0 else "refused: " + os.strerror(ctypes.get_errno()))
    """)
    before = _tree(path.parent)
    result = probe(path)
    assert result.stdout.strip() == "refused: Read-only file system"
    assert result.sandbox["read_only_files"] is True
    assert _tree(path.parent) == before


def test_without_namespaces_the_guard_still_blocks_and_changes_are_reported(script):
    """The honest fallback: Python-level writes are refused, C-level ones are not, but they are seen."""
    path = script("""
        import ctypes, os, pathlib
        try:
            pathlib.Path(__file__).with_name("py.txt").write_text("x")
        except PermissionError:
            print("python write blocked")
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.open(str(pathlib.Path(__file__).with_name("native.txt")).encode(), os.O_WRONLY | os.O_CREAT, 0o644)
        print("native write", "done" if fd >= 0 else "refused")
    """)
    result = probe_file(path, ProbeOptions(isolate=False))
    assert "python write blocked" in result.stdout
    assert result.sandbox["network_namespace"] is False and result.sandbox["read_only_files"] is False
    if "native write done" in result.stdout:
        assert [Path(p).name for p in result.sandbox["changed_files"]] == ["native.txt"]


# --- only when asked ----------------------------------------------------------------------------------


def test_check_without_probe_runs_nothing_and_imports_no_torch(script, tmp_path):
    marker = tmp_path / "ran.txt"
    path = script(f"""
        import pathlib, torch

        def run():
            pathlib.Path({str(marker)!r}).write_text("ran")
            x = torch.randn(3, requires_grad=True)
            y = torch.sigmoid(x)
            y.mul_(2)
            y.sum().backward()

        run()
    """)
    code = ("import sys, gradguard.cli as c; rc = c.main(['check', '--no-jedi', '-q', sys.argv[1]]); "
            "print('torch' in sys.modules, rc)")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "False 1", done.stdout + done.stderr
    assert not marker.exists()


def test_probe_options_need_probe(script, capsys):
    from gradguard.cli import main

    path = script("x = 1\n")
    assert main(["check", "--timeout", "3", str(path)]) == 2
    assert "--timeout only apply with --probe" in capsys.readouterr().err


def test_worker_restarts_after_being_killed(script):
    path = script("print('ok')\n")
    with ProbeWorker() as worker:
        first = worker.probe(path)
        os.killpg(worker.proc.pid, 9)
        worker.proc.wait()
        second = worker.probe(path)
    assert first.stdout == second.stdout == "ok\n"


def test_a_killed_worker_takes_its_running_child_along(script):
    """The worker enforces the timeout; if its client kills it, the child must not run on unwatched."""
    import threading

    path = script("import time\ntime.sleep(300)\n")
    with ProbeWorker() as worker:
        thread = threading.Thread(target=worker.probe, args=(path, ProbeOptions(timeout=300)), daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        children: list[str] = []
        while not children and time.monotonic() < deadline:
            time.sleep(0.1)
            found = subprocess.run(["pgrep", "-P", str(worker.proc.pid)], capture_output=True, text=True)
            children = found.stdout.split()
        assert children, "the probe's child did not start"
        os.killpg(worker.proc.pid, 9)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(Path(f"/proc/{c}").exists() for c in children):
            time.sleep(0.1)
        # a zombie waiting for init to reap it is dead too
        alive = [c for c in children if Path(f"/proc/{c}").exists()
                 and "Z" not in Path(f"/proc/{c}/stat").read_text().split(")")[-1].split()[0]]
        assert alive == []
        thread.join(timeout=30)


def test_stray_output_does_not_break_the_protocol(script, probe):
    path = script("""
        import os, sys
        os.write(1, b'{"not": "a result"}\\n')
        sys.stderr.write("noise\\n")
        print("x" * 100000)
    """)
    result = probe(path)
    assert result.status == "completed"
    assert result.stdout.endswith("x\n") and len(result.stdout) <= 4002
    assert result.stderr == "noise\n"


def test_a_file_that_only_defines_things_says_nothing_was_checked(script, probe):
    path = script("""
        import torch

        def run():
            w = torch.randn(3, requires_grad=True)
            y = w.sigmoid()
            y.mul_(2)
            y.sum().backward()
    """)
    result = probe(path)
    assert result.status == "completed" and result.findings == [] and result.ops == 0
    assert "no tensor operation ran" in result.detail and "--entry" in result.detail
    named = probe(path, entry="run")
    assert named.ops > 0 and [f.code for f in named.findings] == ["GG001"]
    assert "no tensor operation ran" not in named.detail
