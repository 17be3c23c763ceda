"""The warm worker: a long-lived process that has imported torch once and forks a fresh child per
probe.  Run as ``python -m gradguard.probe.worker --base DIR`` by ``runner.ProbeWorker``.

Protocol: one JSON request per line on stdin (``{"path": ..., "options": {...}}``), one JSON
``ProbeResult`` per line on stdout; the first line out is ``{"ready": true, ...}``.  EOF on stdin ends
the worker.

The worker itself never runs a torch op: OpenMP and autograd thread pools do not survive ``fork``,
so they must first start in the child.  It does import everything a first training step would
import lazily (``torch._dynamo`` alone is ~1.4 s, pulled in by the first optimizer), so the child
starts warm.  Each child gets its own process group (the timeout kills the whole group), its own
temporary working folder, the address-space limit and the audit guard, and writes its result to
a pipe; its stdout/stderr go to files whose tails come back in the result.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import select
import shutil
import signal
import sys
import time

from . import model
from .model import ProbeOptions, ProbeResult

GRACE_S = 2.0  # between SIGTERM (the child reports what it saw so far) and SIGKILL
TAIL = 4000


class ProbeTimeout(BaseException):
    """Raised inside the user's code by SIGTERM when the wall-clock budget is spent."""


def _on_sigterm(signum, frame):
    raise ProbeTimeout()


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - TAIL))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return ("…" + text) if size > TAIL else text


# --- in the child ---------------------------------------------------------------------------------


def _print_user_traceback(error: BaseException) -> None:
    """What Python would print for the script's uncaught exception, without the probe's own frames."""
    import traceback

    ours = os.path.dirname(os.path.abspath(__file__))
    tb = error.__traceback__
    while tb is not None and os.path.dirname(os.path.abspath(tb.tb_frame.f_code.co_filename)) == ours:
        tb = tb.tb_next
    try:
        traceback.print_exception(type(error), error, tb, file=sys.stderr)
    except Exception:  # noqa: BLE001 - a broken __str__ must not break the report
        pass


def _probe(path: str, options: ProbeOptions, workdir: str, sandbox: dict) -> ProbeResult:
    from . import sandbox as guard_mod
    from . import exceptions, target, tracer
    import torch

    result = ProbeResult(path, model.FAILED, device=options.device, sandbox=sandbox)
    try:
        wants_cuda = options.device != "cpu"
        device = model.resolve_device(options.device, torch.cuda.is_available() if wants_cuda else False)
    except ValueError as exc:
        result.detail = str(exc)
        return result
    result.device = device
    if device == "cuda":
        torch.set_default_device("cuda")

    user = tracer.UserCode(list(options.roots) or [os.path.dirname(path)])
    tracer.watch_inplace_modules(user)
    reached: set[int] = set()
    try:
        body = target.prepare(path, options.entry, set(options.lines), reached.add)
    except target.TargetError as exc:
        result.detail = str(exc)
        return result

    if device == "cuda" and options.memory_mb:
        # The CUDA driver reserves far more address space than it uses: RLIMIT_AS would stop it.
        memory_problem = "not applied with --device cuda (the CUDA driver reserves huge address ranges)"
    else:
        memory_problem = guard_mod.limit_memory(options.memory_mb)
    result.sandbox = dict(sandbox, memory_mb=options.memory_mb if not memory_problem else None,
                          timeout_s=options.timeout, audit_guard=True,
                          read_only_files=sandbox.get("read_only_files", False)
                          and guard_mod.is_read_only(os.path.dirname(path)))
    if memory_problem:
        result.sandbox["memory_note"] = memory_problem
    guard = guard_mod.install_guard([workdir])
    signal.signal(signal.SIGTERM, _on_sigterm)

    start, cpu = time.perf_counter(), time.process_time()
    tracer_obj, error = tracer.run_traced(body, user, enabled=options.trace)
    result.seconds = time.perf_counter() - start
    result.cpu_seconds = time.process_time() - cpu
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # finish the report; SIGKILL still ends us
    except (AttributeError, OSError):
        pass

    findings = tracer_obj.findings()
    result.reached = sorted(reached)
    result.blocked = list(guard.blocked)
    seconds = f"{result.seconds:.2f} s"
    result.ops = tracer_obj.ops
    if error is None:
        result.status, result.detail = model.COMPLETED, f"the script ran to its end in {seconds}"
        if options.trace and result.ops == 0:
            result.detail += (", but no tensor operation ran, so nothing was checked: the file only defines things. "
                              "Name a function to call (`--entry NAME`; `probe.entry` in the editor) or add an "
                              "`if __name__ == \"__main__\":` block")
    elif isinstance(error, SystemExit):
        code = error.code
        result.status = model.EXITED
        result.exit_code = code if isinstance(code, int) else (0 if code is None else 1)
        shown = "" if code is None else repr(code)
        result.detail = f"the script called sys.exit({shown}) after {seconds}"
    elif isinstance(error, ProbeTimeout):
        result.status = model.TIMEOUT
        result.detail = f"stopped after the {options.timeout:g} s timeout; findings up to that point are reported"
    elif isinstance(error, target.TargetError):
        result.detail = str(error)
    elif exceptions.is_memory_error(error):
        result.status = model.MEMORY
        limit = f"the {options.memory_mb} MB address-space limit" if options.memory_mb else "memory"
        first = str(error).split("\n", 1)[0][:300]
        result.detail = f"ran out of memory under {limit} after {seconds}: {type(error).__name__}: {first}"
    else:
        _print_user_traceback(error)
        finding = exceptions.classify_exception(error, user, tracer_obj)
        emulated = str(error) in tracer_obj.emulated
        line = exceptions.exception_line(error, user)
        first = str(error).split("\n", 1)[0][:500]
        result.status = model.RAISED
        result.exception = {"type": type(error).__name__, "message": first, "line": line,
                            "finding": finding is not None or emulated}
        where = f" at line {line}" if line else ""
        if finding is not None or emulated:
            result.detail = f"the script stopped{where} with the error the findings explain, after {seconds}"
        else:
            result.detail = f"the script raised {type(error).__name__}{where}, unrelated to autograd: {first}"
        if finding is not None:
            findings.append(finding)
    if tracer_obj.internal_errors:
        result.sandbox["tracer_errors"] = tracer_obj.internal_errors[:5]
    findings.sort(key=lambda f: (f.site.path, f.site.line, f.site.column, f.code))
    result.findings = findings
    return result


def _die_with_parent() -> None:
    """If the worker dies (killed by its client), the child must not outlive it: nobody would time it out."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            os._exit(1)
    except (OSError, AttributeError):
        pass


def _child(request: dict, workdir: str, out_fd: int, sandbox: dict) -> None:
    """Runs in the forked child; never returns."""
    status = 0
    try:
        os.setsid()
        _die_with_parent()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
            f = os.open(os.path.join(workdir, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)
        os.chdir(workdir)
        from .sandbox import private_environment

        private_environment(workdir)
        options = ProbeOptions.from_json(request["options"])
        result = _probe(request["path"], options, workdir, sandbox)
    except BaseException as exc:  # noqa: BLE001 - report, never a traceback from gradguard
        result = ProbeResult(request.get("path", "?"), model.FAILED, f"internal error in the probe: {exc!r}")
        status = 1
    try:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        result.stdout = _tail(os.path.join(workdir, "stdout.txt"))
        result.stderr = _tail(os.path.join(workdir, "stderr.txt"))
        data = (json.dumps(result.to_json()) + "\n").encode()
        view = memoryview(data)
        while view:
            view = view[os.write(out_fd, view):]
    finally:
        os._exit(status)


# --- in the worker ----------------------------------------------------------------------------------


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def handle(request: dict, base: str, serial: int, sandbox: dict) -> dict:
    options = ProbeOptions.from_json(request["options"])
    workdir = os.path.join(base, f"run-{serial}")
    os.mkdir(workdir, 0o700)
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(request, workdir, write_fd, sandbox)
    os.close(write_fd)
    chunks: list[bytes] = []
    deadline = started + options.timeout
    timed_out = False
    killed_at = None
    while True:
        now = time.monotonic()
        if not timed_out and now >= deadline:
            timed_out = True
            _kill_group(pid, signal.SIGTERM)
            killed_at = now
        if timed_out and now >= killed_at + GRACE_S:
            _kill_group(pid, signal.SIGKILL)
            break
        wait = (deadline if not timed_out else killed_at + GRACE_S) - now
        ready, _, _ = select.select([read_fd], [], [], max(0.0, min(wait, 1.0)))
        if ready:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(read_fd)
    _, wait_status = os.waitpid(pid, 0)
    _kill_group(pid, signal.SIGKILL)  # whatever the script started in its group
    shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.monotonic() - started
    data = b"".join(chunks)
    try:
        result = json.loads(data) if data else None
    except ValueError:
        result = None
    if result is None:
        if timed_out:
            result = ProbeResult(request["path"], model.TIMEOUT,
                                 f"killed after the {options.timeout:g} s timeout (it did not stop on SIGTERM)",
                                 device=options.device, sandbox=sandbox).to_json()
        else:
            how = (f"was killed by {_signal_name(os.WTERMSIG(wait_status))}" if os.WIFSIGNALED(wait_status)
                   else f"exited with status {os.WEXITSTATUS(wait_status)} without a result")
            hint = ""
            if os.WIFSIGNALED(wait_status) and os.WTERMSIG(wait_status) in (signal.SIGKILL, signal.SIGABRT,
                                                                              signal.SIGSEGV):
                hint = f" (possibly out of memory under the {options.memory_mb} MB limit)" if options.memory_mb else ""
            result = ProbeResult(request["path"], model.CRASHED, f"the probed process {how}{hint}",
                                 device=options.device, sandbox=sandbox).to_json()
    elif timed_out and result.get("status") not in (model.TIMEOUT,):
        result["status"] = model.TIMEOUT
        result["detail"] = f"stopped after the {options.timeout:g} s timeout; findings up to that point are reported"
    result["total_seconds"] = elapsed
    return result


def _netns_differs(parent_inode: str | None) -> bool:
    if not parent_inode:
        return False
    try:
        return str(os.stat("/proc/self/ns/net").st_ino) != parent_inode
    except OSError:
        return False


def warm_imports() -> dict:
    """Import now what a first training step would import lazily.  Runs no torch op."""
    import torch
    import torch.nn  # noqa: F401
    import torch.nn.functional  # noqa: F401
    import torch.optim  # noqa: F401
    import torch.utils.data  # noqa: F401

    try:
        import torch._dynamo  # noqa: F401 - the first optimizer.step() imports it (~1.4 s)
    except Exception:  # noqa: BLE001 - optional; only costs time later
        pass
    from . import exceptions, target, tracer  # noqa: F401

    return {"torch": torch.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gradguard.probe.worker")
    parser.add_argument("--base", required=True)
    parser.add_argument("--read-only", action="store_true", help="remount all but --base read-only (needs a mount ns)")
    parser.add_argument("--parent-netns", default=None)
    args = parser.parse_args(argv)

    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # stray prints (ours or a library's) must not corrupt the protocol
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    sandbox: dict = {"network_namespace": _netns_differs(args.parent_netns), "read_only_files": False}
    if args.read_only:
        from .sandbox import make_read_only

        try:
            sandbox.update(make_read_only(os.path.realpath(args.base)))
        except OSError as exc:
            sandbox["read_only_note"] = str(exc)
    try:
        info = warm_imports()
    except Exception as exc:  # noqa: BLE001 - torch missing or broken: say so
        protocol.write(json.dumps({"ready": False, "error": f"cannot import torch: {exc}"}) + "\n")
        protocol.flush()
        return 1
    # Everything imported so far lives as long as the worker: keep it out of the collector, so the
    # child's gc.collect() scans only the script's objects (~300 ms saved) and fork copies fewer pages.
    gc.collect()
    gc.freeze()
    protocol.write(json.dumps({"ready": True, "sandbox": sandbox, **info}) + "\n")
    protocol.flush()

    serial = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        serial += 1
        try:
            request = json.loads(line)
            response = handle(request, args.base, serial, sandbox)
        except Exception as exc:  # noqa: BLE001 - one bad request must not end the worker
            response = ProbeResult("?", model.FAILED, f"internal error in the probe worker: {exc!r}").to_json()
        protocol.write(json.dumps(response) + "\n")
        protocol.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
