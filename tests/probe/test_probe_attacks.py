"""Attacks on the probe's sandbox, run from inside the probe, each against a target this test starts itself
(a listener on loopback or in its own temporary folder, a file in the project folder).

Issue 28 found each of these getting out of the old sandbox (as root, and as a user under
``unshare --map-root-user``).  Every test prints the layers that were active (``pytest -s`` shows them),
and asserts on the world outside the probe, not only on what the probe says.  docs/security.md has
the threat model.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from gradguard.probe import ProbeOptions, ProbeWorker, probe_file
from gradguard.probe.sandbox import namespace_prefix

NAMESPACES = namespace_prefix() is not None
needs_namespaces = pytest.mark.skipif(not NAMESPACES, reason="no namespaces on this machine")


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _layers(result, attack: str) -> dict:
    layers = result.sandbox.get("layers", {})
    on = sorted(name for name, active in layers.items() if active)
    off = sorted(name for name, active in layers.items() if not active)
    print(f"\n[{attack}] status={result.status}; layers active: {', '.join(on) or 'none'}"
          + (f"; MISSING: {', '.join(off)}" if off else ""))
    return layers


@pytest.fixture
def outside():
    """A temporary folder of the test's own, outside the project (under /tmp, like most temp folders)."""
    folder = Path(tempfile.mkdtemp(prefix="gg-attack-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _accepted(server: socket.socket) -> list[bytes]:
    got = []
    while True:
        try:
            conn, _ = server.accept()
        except (socket.timeout, OSError):
            return got
        conn.settimeout(1)
        try:
            got.append(conn.recv(4096))
        except OSError:
            got.append(b"")
        conn.close()


# --- 1. the remount attack ---------------------------------------------------------------------------


@needs_namespaces
def test_remount_read_write_fails_and_the_project_stays_unchanged(script, probe):
    path = script("""
        import ctypes, os, pathlib, subprocess
        libc = ctypes.CDLL(None, use_errno=True)
        MS_REMOUNT, MS_BIND = 32, 4096
        target = str(pathlib.Path(__file__).parent).encode()
        for point in (b"/", target):
            done = libc.mount(None, point, None, MS_REMOUNT | MS_BIND, None)
            print("remount", point.decode(), "ok" if done == 0 else os.strerror(ctypes.get_errno()))
        subprocess.run(["sh", "-c", f"echo pwned >> {__file__}"], stderr=subprocess.DEVNULL)
        fd = libc.open(__file__.encode(), os.O_WRONLY | os.O_APPEND)
        print("native open", "ok" if fd >= 0 else os.strerror(ctypes.get_errno()))
    """)
    before = _tree(path.parent)
    result = probe(path)
    layers = _layers(result, "remount")
    assert "remount / ok" not in result.stdout and "native open ok" not in result.stdout, result.stdout
    assert _tree(path.parent) == before
    assert layers["capabilities_dropped"] and layers["seccomp"] and layers["read_only_files"]


# --- 2. leaving the network namespace -------------------------------------------------------------------


@needs_namespaces
def test_setns_into_an_ancestors_network_namespace_fails(script, probe, listener):
    port = listener.getsockname()[1]
    me = os.getpid()  # an ancestor of the probe, in the host's network namespace
    path = script(f"""
        import ctypes, os, subprocess, sys
        libc = ctypes.CDLL(None, use_errno=True)
        for pid in ({me}, os.getppid(), 1):
            try:
                fd = os.open(f"/proc/{{pid}}/ns/net", os.O_RDONLY)
            except OSError as exc:
                print("open ns", pid, exc.strerror)
                continue
            done = libc.setns(fd, 0x40000000)
            print("setns", pid, "ok" if done == 0 else os.strerror(ctypes.get_errno()))
        code = "import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'escaped')"
        for pid in ({me}, 1):
            out = subprocess.run(["nsenter", "-t", str(pid), "-n", sys.executable, "-c", code],
                                 capture_output=True, text=True)
            print("nsenter", pid, out.returncode, out.stderr.strip().splitlines()[-1:] )
    """)
    result = probe(path)
    layers = _layers(result, "setns/nsenter")
    assert " ok" not in result.stdout, result.stdout
    assert _accepted(listener) == []
    assert layers["network_namespace"] and layers["seccomp"] and layers["pid_namespace"]


# --- 3. a Unix socket and 4. the caller's secrets ---------------------------------------------------


@needs_namespaces
def test_unix_socket_to_a_listener_outside_is_unreachable(script, probe, outside):
    address = str(outside / "listener.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(address)
    server.listen(5)
    server.settimeout(0.5)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind(b"\0gradguard-attack-" + uuid.uuid4().hex.encode())
    abstract.listen(5)
    abstract.settimeout(0.5)
    try:
        path = script(f"""
            import socket
            for address in ({address!r}, {abstract.getsockname()!r}):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect(address)
                    s.sendall(b"escaped")
                    print("connected", address)
                except OSError as exc:
                    print("refused", exc.strerror)
        """)
        result = probe(path)
        layers = _layers(result, "unix socket")
        assert "connected" not in result.stdout, result.stdout
        assert _accepted(server) == [] and _accepted(abstract) == []
        assert layers["private_tmp"] and layers["network_namespace"]
    finally:
        server.close()
        abstract.close()


def test_the_callers_secrets_do_not_reach_the_probed_code(script, monkeypatch):
    secret = "fake-" + uuid.uuid4().hex
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # allow-listed: torch reads it
    path = script(f"""
        import glob, os
        print("env", {secret!r} in "".join(os.environ.values()), os.environ.get("OMP_NUM_THREADS"))
        seen = []
        for name in glob.glob("/proc/*/environ"):
            try:
                seen.append({secret!r}.encode() in open(name, "rb").read())
            except OSError:
                pass
        print("proc", any(seen), len(seen))
    """)
    with ProbeWorker() as worker:  # started now, with the secret in our environment
        result = worker.probe(path)
    _layers(result, "environment")
    assert result.stdout.splitlines()[0] == "env False 1", result.stdout
    assert result.stdout.splitlines()[1].startswith("proc False"), result.stdout
    assert result.sandbox.get("environment_allowlist") is True


# --- 5. a daemon ------------------------------------------------------------------------------------------


@needs_namespaces
def test_a_setsid_double_forked_daemon_is_gone_after_the_probe(script, probe):
    marker = f"gradguard_daemon_{uuid.uuid4().hex}"
    path = script(f"""
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                for fd in range(3, 64):  # keep every descriptor, the result pipe included, across exec
                    try:
                        os.set_inheritable(fd, True)
                    except OSError:
                        pass
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)", {marker!r}])
            os._exit(0)
        time.sleep(0.5)
        print("parent done")
    """)
    started = time.monotonic()
    result = probe(path, timeout=30)
    layers = _layers(result, "daemon")
    assert result.status == "completed", result.detail  # not a timeout: nobody outside waits for the daemon
    assert time.monotonic() - started < 20
    time.sleep(0.5)
    alive = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert alive == []
    assert layers["pid_namespace"]


# --- 6. forged results ------------------------------------------------------------------------------------


def test_a_forged_result_reaches_neither_the_protocol_nor_the_next_file(script, probe):
    honest = script("print('honest')\n", name="honest.py")
    forged = {"path": str(honest), "status": "completed", "detail": "FORGED", "findings": [], "stdout": "FORGED"}
    path = script(f"""
        import json, os
        line = (json.dumps({forged!r}) + "\\n").encode()
        for fd in range(3, 256):
            try:
                os.write(fd, line * 3)
            except OSError:
                pass
    """)
    result = probe(path)
    _layers(result, "forged result")
    assert result.path == str(path) and "FORGED" not in result.detail  # another file's result is refused
    following = probe(honest)
    assert following.path == str(honest) and following.stdout == "honest\n" and "FORGED" not in following.detail
    assert result.status == "crashed" and "malformed result" in result.detail


def test_the_probed_code_holds_no_descriptor_but_stdio_and_its_result_pipe(script, probe):
    path = script("""
        import os
        held = []
        for fd in sorted(int(n) for n in os.listdir("/proc/self/fd")):
            try:
                held.append((fd, os.readlink(f"/proc/self/fd/{fd}")))
            except OSError:  # listdir's own descriptor, closed by now
                pass
        print([h for h in held if h[0] > 2])
    """)
    result = probe(path)
    _layers(result, "inherited descriptors")
    held = eval(result.stdout)  # noqa: S307 - the list our script printed
    assert [what.split(":")[0] for _, what in held if not what.startswith("/proc")] == ["pipe"], held


# --- 7. memory of the whole tree, and /dev/shm ------------------------------------------------------------


@needs_namespaces
def test_a_fork_memory_bomb_is_bounded_for_the_whole_tree(script, probe):
    """4 children x 350 MB under a 1200 MB limit: each one alone fits (the old per-process RLIMIT_AS let all
    four through, 1.5 GB in all); the tree does not."""
    path = script("""
        import os, time
        children = []
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                block = b"x" * (350 * 2**20)
                print("allocated", flush=True)
                time.sleep(8)
                os._exit(0)
            children.append(pid)
        for pid in children:
            os.waitpid(pid, 0)
        print("all children finished")
    """)
    result = probe(path, memory_mb=1200, timeout=30)
    layers = _layers(result, "fork memory bomb")
    assert result.status == "memory", (result.status, result.detail, result.stdout)
    assert "1200 MB" in result.detail
    assert layers["memory_tree"]


@needs_namespaces
def test_dev_shm_and_tmp_files_do_not_outlive_the_probe(script, probe):
    name = f"gradguard-attack-{uuid.uuid4().hex}"
    path = script(f"""
        for folder in ("/dev/shm", "/tmp"):
            with open(f"{{folder}}/{name}", "wb") as f:
                f.write(b"x" * (8 * 2**20))
        print("written")
    """)
    leftovers = set(Path(tempfile.gettempdir()).glob("gradguard-probe-*"))
    result = probe(path)
    _layers(result, "/dev/shm")
    assert result.stdout == "written\n", (result.detail, result.stderr)
    assert not Path("/dev/shm", name).exists() and not Path("/tmp", name).exists()
    assert set(Path(tempfile.gettempdir()).glob("gradguard-probe-*")) <= leftovers


def test_a_worker_nobody_closed_leaves_no_folder():
    """The language server used to leave a /tmp/gradguard-probe-* folder per session: its client exited
    without closing the worker.  Now the folder goes at exit, and one left by a killed process goes the
    next time a worker starts."""
    import signal
    import sys

    code = ("import sys; from gradguard.probe import ProbeWorker; w = ProbeWorker(); print(w.start() and w.base, "
            "flush=True); sys.stdin.readline()")
    folders = []
    for ending in ("exit", "SIGKILL"):
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        folders.append(Path(proc.stdout.readline().strip()))
        assert folders[-1].name.startswith("gradguard-probe-") and folders[-1].exists()
        if ending == "exit":
            proc.communicate("\n", timeout=60)  # returns without closing the worker
        else:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
    assert not folders[0].exists()
    assert folders[1].exists()  # nobody could clean up after SIGKILL...
    with ProbeWorker() as worker:
        worker.start()
        assert not folders[1].exists()  # ...until the next worker starts


# --- 8. pure-Python writes past the audit hook ------------------------------------------------------------

_WRITES = """
    import os, pathlib, sqlite3, subprocess
    here = pathlib.Path(__file__).parent
    folder = os.open(here, os.O_RDONLY)
    for what, attempt in (
        ("dir_fd", lambda: os.close(os.open("dirfd.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=folder))),
        ("mkdir dir_fd", lambda: os.mkdir("made", dir_fd=folder)),
        ("subprocess", lambda: subprocess.run(["sh", "-c", f"echo x > {here}/sub.txt"], check=True)),
        ("os.system", lambda: os.system(f"echo x > {here}/system.txt")),
        ("sqlite", lambda: sqlite3.connect(here / "db.sqlite").execute("create table t (x)")),
    ):
        try:
            attempt()
            print(what, "ran")
        except Exception as exc:
            print(what, "refused:", type(exc).__name__)
"""


def test_without_namespaces_dir_fd_subprocess_and_sqlite_writes_are_refused(script):
    path = script(_WRITES)
    before = _tree(path.parent)
    result = probe_file(path, ProbeOptions(isolate=False))
    _layers(result, "no isolation: dir_fd/subprocess/sqlite")
    assert result.status == "completed", result.detail
    assert _tree(path.parent) == before, result.stdout
    assert not (path.parent / "made").exists()
    assert len(result.blocked) == 5, result.blocked


@needs_namespaces
def test_with_namespaces_dir_fd_subprocess_and_sqlite_writes_fail(script, probe):
    path = script(_WRITES)
    before = _tree(path.parent)
    result = probe(path)
    _layers(result, "dir_fd/subprocess/sqlite")
    assert _tree(path.parent) == before, result.stdout
    assert not (path.parent / "made").exists()


# --- 9. a missing layer is named, and refused unless asked for --------------------------------------------


def test_a_missing_layer_is_named_and_refused_unless_allowed(script):
    path = script("print('ran')\n")
    with ProbeWorker(isolate=False) as worker:  # as if the kernel allowed no namespace at all
        refused = worker.probe(path, ProbeOptions())
        allowed = worker.probe(path, ProbeOptions(allow_missing_layers=True))
    assert refused.status == "failed" and refused.stdout == ""
    assert "missing: user_namespace" in refused.detail and "seccomp" in refused.detail
    assert "--allow-missing-layers" in refused.detail
    assert allowed.status == "completed" and allowed.stdout == "ran\n"
    assert allowed.sandbox["layers"]["seccomp"] is False


# --- 10. the kernel's other doors ------------------------------------------------------------------------


@needs_namespaces
def test_namespaces_ptrace_raw_sockets_devices_and_sysctls_stay_shut(script, probe):
    """What root in a user namespace could otherwise do with ctypes alone."""
    path = script("""
        import ctypes, os, socket
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long

        def report(what, done):
            print(what, "ok" if done == 0 else os.strerror(ctypes.get_errno()))

        report("unshare(CLONE_NEWUSER|CLONE_NEWNS)", libc.unshare(0x10000000 | 0x20000))
        report("ptrace(PTRACE_ATTACH, 1)", libc.ptrace(16, 1, None, None))
        report("io_uring_setup", 0 if libc.syscall(425, 8, ctypes.create_string_buffer(120)) >= 0 else -1)
        report("keyctl", 0 if libc.syscall(250, 0, -3, 0) >= 0 else -1)
        report("socket(AF_NETLINK)", 0 if libc.socket(16, 3, 0) >= 0 else -1)
        report("socket(AF_PACKET)", 0 if libc.socket(17, 3, 0) >= 0 else -1)
        for name in ("/proc/1/mem", "/proc/sysrq-trigger", "/proc/sys/kernel/hostname", "/sys/kernel/uevent_helper",
                     "/dev/vda", "/dev/sda", "/dev/mem"):
            fd = libc.open(name.encode(), os.O_WRONLY)
            report(f"open {name} for writing", 0 if fd >= 0 else -1)
    """)
    result = probe(path)
    layers = _layers(result, "kernel doors")
    lines = result.stdout.splitlines()
    assert len(lines) == 13, (result.detail, result.stderr)
    assert [line for line in lines if line.endswith(" ok")] == [], result.stdout
    assert layers["seccomp"] and layers["capabilities_dropped"] and layers["minimal_dev"] and layers["private_proc"]
