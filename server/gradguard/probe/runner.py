"""The parent side: starts the sandboxed worker and asks it to probe files.  No torch here.

``probe_file(path, options)`` is the one call the CLI and the language server need.  Pass a
``ProbeWorker`` to reuse one warm worker across calls (the language server, the tests); without one,
a worker is started for the call and stopped after it (``import torch`` is paid each time).
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import model
from .model import ProbeOptions, ProbeResult
from .sandbox import allowed_environment, namespace_prefix

STARTUP_TIMEOUT_S = 180.0  # importing torch on a cold disk can be slow
SLACK_S = 15.0  # beyond the probe's own timeout before the worker itself is declared hung
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


_PREFIX = "gradguard-probe-"
_LIVE: set[str] = set()  # this process's worker folders, removed at exit even if nobody closed the worker


@atexit.register
def _remove_live_folders() -> None:
    for folder in list(_LIVE):
        shutil.rmtree(folder, ignore_errors=True)


def _remove_stale_folders() -> None:
    """``gradguard-probe-<pid>-*`` folders whose process is gone (it was killed before it could clean up)."""
    try:
        names = os.listdir(tempfile.gettempdir())
    except OSError:
        return
    for name in names:
        pid = name[len(_PREFIX):].split("-", 1)[0]
        if not name.startswith(_PREFIX) or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (or someone else's process: leave it)
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        folder = os.path.join(tempfile.gettempdir(), name)
        try:
            if os.stat(folder).st_uid == os.getuid():
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            pass


class WorkerError(Exception):
    """The worker could not be started or stopped answering."""


class ProbeWorker:
    """One sandboxed warm worker.  Thread-safe (requests are serialised); restarts itself after a crash.

    ``isolate``: run it in new network and mount namespaces when the kernel allows (default).
    """

    def __init__(self, isolate: bool = True, python: str | None = None):
        self.isolate = isolate
        self.python = python or sys.executable
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        self.base: str | None = None
        self._buffer = b""
        self._lock = threading.Lock()
        self._log = None

    # -- lifecycle --

    def __enter__(self) -> "ProbeWorker":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> dict:
        if self.alive:
            return self.info
        self._cleanup()
        _remove_stale_folders()
        self.base = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
        _LIVE.add(self.base)
        prefix = namespace_prefix() if self.isolate else None
        command = [*(prefix or ()), self.python, "-m", "gradguard.probe.worker", "--base", self.base]
        for kind in ("net", "user"):
            try:
                command += [f"--parent-{kind}ns", str(os.stat(f"/proc/self/ns/{kind}").st_ino)]
            except OSError:
                pass
        if prefix:
            command.append("--isolated")
        # Only the allow-list crosses: no token or key in the caller's environment reaches the worker,
        # whose /proc/1/environ the user's code might otherwise read.
        env = allowed_environment(os.environ)
        env["HOME"] = env["TMPDIR"] = self.base
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.setdefault("MALLOC_ARENA_MAX", "2")  # keeps the address space (RLIMIT_AS) small on many cores
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
        self._log = open(os.path.join(self.base, "worker.log"), "wb")
        self._buffer = b""
        try:
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                         start_new_session=True, env=env, cwd=self.base)
        except OSError as exc:
            raise WorkerError(f"cannot start the probe worker: {exc}") from None
        line = self._read_line(STARTUP_TIMEOUT_S)
        if line is None:
            log = self._log_tail()
            self._kill()
            raise WorkerError(f"the probe worker did not start{': ' + log if log else ''}")
        info = json.loads(line)
        if not info.get("ready"):
            self._kill()
            raise WorkerError(info.get("error", "the probe worker did not start"))
        self.info = info
        return info

    def close(self) -> None:
        if self.proc is not None:
            try:
                if self.proc.stdin:
                    self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self._kill()
        self._cleanup()

    def _kill(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    if stream:
                        stream.close()
                except OSError:
                    pass
            self.proc = None

    def _cleanup(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.base:
            shutil.rmtree(self.base, ignore_errors=True)
            _LIVE.discard(self.base)
            self.base = None

    def _log_tail(self) -> str:
        try:
            return Path(self.base, "worker.log").read_text(errors="replace")[-2000:].strip()
        except (OSError, TypeError):
            return ""

    # -- requests --

    def _read_line(self, timeout: float) -> bytes | None:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return None
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return None
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def probe(self, path: str | os.PathLike, options: ProbeOptions | None = None) -> ProbeResult:
        options = options or ProbeOptions()
        path = os.path.realpath(os.fspath(path))
        if not os.path.isfile(path):
            return ProbeResult(path, model.FAILED, f"no such file: {path}", device=options.device)
        started = time.monotonic()
        with self._lock:
            try:
                self.start()
            except WorkerError as exc:
                return ProbeResult(path, model.FAILED, str(exc), device=options.device)
            request = json.dumps({"path": path, "options": options.to_json()}) + "\n"
            try:
                assert self.proc is not None and self.proc.stdin is not None
                self.proc.stdin.write(request.encode())
                self.proc.stdin.flush()
                line = self._read_line(options.timeout + SLACK_S)
            except (OSError, ValueError):
                line = None
            if line is None:
                log = self._log_tail()
                self._kill()
                self._cleanup()
                result = ProbeResult(path, model.CRASHED, "the probe worker stopped answering and was killed"
                                     + (f": {log[-300:]}" if log else ""), device=options.device)
            else:
                result = ProbeResult.from_json(json.loads(line))
        result.total_seconds = time.monotonic() - started
        return result


def _snapshot(folder: str, limit: int = 5000) -> dict[str, tuple[int, int]]:
    """(mtime, size) of the files under ``folder``, to prove afterwards that nothing changed."""
    from ..files import SKIP_DIRS

    seen: dict[str, tuple[int, int]] = {}
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        for name in files:
            full = os.path.join(root, name)
            try:
                st = os.stat(full)
            except OSError:
                continue
            seen[full] = (st.st_mtime_ns, st.st_size)
            if len(seen) >= limit:
                return seen
    return seen


def probe_file(path: str | os.PathLike, options: ProbeOptions | None = None,
               worker: ProbeWorker | None = None) -> ProbeResult:
    """Probe one file and return what the run showed.  Never raises for a problem of the target's."""
    options = options or ProbeOptions()
    own = worker is None
    worker = worker or ProbeWorker(isolate=options.isolate)
    folder = os.path.dirname(os.path.realpath(os.fspath(path)))
    guarded = worker.alive and worker.info.get("sandbox", {}).get("read_only_files")
    before = None if guarded else _snapshot(folder)
    try:
        result = worker.probe(path, options)
    finally:
        if own:
            worker.close()
    if before is not None and not result.sandbox.get("read_only_files"):
        after = _snapshot(folder)
        changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
        result.sandbox["files_checked"] = len(after)
        result.sandbox["changed_files"] = changed[:20]
    return result
