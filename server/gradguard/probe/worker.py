"""The warm worker: a long-lived process that has imported torch once and forks a fresh child per
probe.  Run as ``python -m gradguard.probe.worker --base DIR`` by ``runner.ProbeWorker``.

Protocol: one JSON request per line on stdin (``{"path": ..., "options": {...}}``), one JSON
``ProbeResult`` per line on stdout; the first line out is ``{"ready": true, ...}``.  EOF on stdin ends
the worker.

The worker itself never runs a torch op: OpenMP and autograd thread pools do not survive ``fork``,
so they must first start in the child.  It does import everything a first training step would
import lazily (``torch._dynamo`` alone is ~1.4 s, pulled in by the first optimizer), so the child
starts warm.  Each child is locked down before the user's code runs (``sandbox``: a private /tmp and
/dev/shm, an allow-listed environment, no inherited descriptor but its result pipe, limits, no
capabilities, no_new_privs, seccomp), and writes two lines to its result pipe: ``{"armed": ...}`` just
before the user's code runs (the worker then checks the child's capabilities, no_new_privs and
seccomp mode in ``/proc``), and the result.  Its stdout/stderr go to files whose tails come back in
the result.  In a PID namespace the worker is its init: after each probe it kills every process left
(``kill(-1)``), and while the probe runs it adds up the memory of the whole tree.

What the worker reports about the sandbox (``ProbeResult.sandbox``) is what the worker itself saw;
the child's own claims are not trusted.  The findings, the status and ``blocked`` do come from the
child, that is from the process the user's code runs in: a hostile script can forge its own result
(docs/security.md), never another file's.
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

    user = tracer.UserCode(list(options.roots) or [options.module_root or os.path.dirname(path)])
    tracer.watch_inplace_modules(user)
    reached: set[int] = set()
    try:
        body = target.prepare(path, options.entry, set(options.lines), reached.add, options.module,
                              options.module_root, options.argv)
    except target.TargetError as exc:
        result.detail = str(exc)
        return result

    if device == "cuda" and options.memory_mb:
        # The CUDA driver reserves far more address space than it uses: RLIMIT_AS would stop it.
        memory_problem = "not applied with --device cuda (the CUDA driver reserves huge address ranges)"
    else:
        memory_problem = guard_mod.limit_memory(options.memory_mb)
    result.sandbox = dict(sandbox, memory_mb=options.memory_mb if not memory_problem else None,
                          timeout_s=options.timeout, audit_guard=True)
    if memory_problem:
        result.sandbox["memory_note"] = memory_problem
    writable = [workdir, "/tmp"] if sandbox.get("private_tmp") else [workdir]  # a private /tmp is the script's
    guard = guard_mod.install_guard(writable, strict=not sandbox.get("isolated"),
                                    read_only=[os.path.dirname(path), *options.roots])
    signal.signal(signal.SIGTERM, _on_sigterm)

    start, cpu = time.perf_counter(), time.process_time()
    tracer_obj, error = tracer.run_traced(body, user, enabled=options.trace)
    result.seconds = time.perf_counter() - start
    result.cpu_seconds = time.process_time() - cpu
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # finish the report; SIGKILL still ends us
    except (AttributeError, OSError):
        pass

    explained = None
    if error is not None and not isinstance(error, (SystemExit, ProbeTimeout, target.TargetError)) \
            and not exceptions.is_memory_error(error):
        explained = exceptions.classify_exception(error, user, tracer_obj)
        if explained is not None or str(error) in tracer_obj.emulated:
            _unwind(error)
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
        finding = explained
        emulated = str(error) in tracer_obj.emulated
        line = exceptions.exception_line(error, user)
        first = str(error).split("\n", 1)[0][:500]
        result.status = model.RAISED
        result.exception = {"type": type(error).__name__, "message": first, "line": line,
                            "path": _exception_path(error, user), "finding": finding is not None or emulated}
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


def _unwind(error: BaseException) -> None:
    """The run stopped at an autograd error the findings explain: the functions it stopped in would have returned,
    dropping the graphs only their locals hold.  Their frames, kept by the traceback, are cleared so that a graph held
    by them alone is not "still alive when the run ended" (a pending finding of the crash, not of the program); a
    script's top level keeps its names, as a run that ends does."""
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name != "<module>":
            try:
                tb.tb_frame.clear()
            except RuntimeError:  # a frame still running
                pass
        tb = tb.tb_next


def _exception_path(error: BaseException, user) -> str | None:
    """The file of the innermost user frame of ``error``'s traceback (the file of ``exception["line"]``)."""
    from .frames import traceback_sites

    try:
        sites = traceback_sites(error.__traceback__, user)
    except Exception:  # noqa: BLE001 - only a detail of the report
        return None
    return sites[0].path if sites else None


def _die_with_parent(parent: int) -> None:
    """If the worker dies (killed by its client), the child must not outlive it: nobody would time it out."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # it died before the line above
            os._exit(1)
    except (OSError, AttributeError):
        pass


REQUIRED = ("user_namespace", "network_namespace", "pid_namespace", "read_only_files", "private_proc", "minimal_dev",
            "private_tmp", "environment_allowlist", "process_limit", "capabilities_dropped", "no_new_privs",
            "seccomp", "memory_tree")


def missing_layers(layers: dict) -> list[str]:
    return [name for name in REQUIRED if not layers.get(name)]


def refusal(missing: list[str], layers: dict) -> str:
    named = ", ".join(name + (f" ({layers[name + '_note']})" if layers.get(name + "_note") else "") for name in missing)
    return (f"refused to run: this kernel does not allow every layer of the sandbox; missing: {named}. "
            "`--allow-missing-layers` runs the file with the layers that work; `--no-isolation` with none")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _lock_down(request: dict, options: ProbeOptions, sandbox: dict, base: str, serial: int) -> tuple[str, dict]:
    """In the child, before the user's code: the per-probe layers.  Returns the working folder and the
    layers it got (``name_note`` says why one failed)."""
    from . import sandbox as box

    layers: dict = {}
    workdir = None
    if sandbox.get("isolated"):
        size = max(64, (options.memory_mb or 4096) // 2)
        try:
            keep = [os.path.dirname(request["path"]), *options.roots]
            if options.module and options.module_root:
                keep.append(options.module_root)  # ``python -m`` imports the parent packages from there
            workdir = box.private_tmp(keep, size, hide=base)
            layers["private_tmp"] = True
        except OSError as exc:
            layers["private_tmp_note"] = str(exc)
    if workdir is None:
        workdir = os.path.join(base, f"run-{serial}")
        os.mkdir(workdir, 0o700)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
        f = os.open(os.path.join(workdir, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    os.chdir(workdir)
    box.reduce_environment(workdir)
    layers["environment_allowlist"] = True
    if not sandbox.get("isolated"):
        return workdir, layers
    layers["read_only_files"] = sandbox.get("read_only_files", False) and box.is_read_only(
        os.path.dirname(request["path"]))
    layers["process_limit"] = box.limit_processes() and bool(sandbox.get("user_namespace"))
    if not sandbox.get("user_namespace"):
        layers["process_limit_note"] = "RLIMIT_NPROC does not bind root outside a user namespace"
    for name, step in (("capabilities_dropped", box.drop_capabilities), ("no_new_privs", box.no_new_privs),
                       ("seccomp", box.install_seccomp)):
        try:
            step()
        except OSError as exc:
            layers[name + "_note"] = str(exc)
    layers.update(box.locked_down(box.kernel_view()))
    return workdir, layers


def _child(request: dict, out_fd: int, sandbox: dict, base: str, serial: int, parent: int) -> None:
    """Runs in the forked child; never returns."""
    status = 0
    workdir = None
    armed = False
    try:
        os.setsid()
        _die_with_parent(parent)
        from .sandbox import close_other_fds

        close_other_fds({out_fd})  # the worker's protocol pipes, and anything else it had open
        options = ProbeOptions.from_json(request["options"])
        workdir, layers = _lock_down(request, options, sandbox, base, serial)
        layers = dict(sandbox, **layers)
        # Written before the user's code runs, so the worker can trust it (and checks it against /proc).
        _write_all(out_fd, (json.dumps({"armed": layers}) + "\n").encode())
        armed = True
        missing = missing_layers(layers) if options.isolate else []
        if missing and not options.allow_missing_layers:
            result = ProbeResult(request["path"], model.FAILED, refusal(missing, layers), device=options.device)
        else:
            result = _probe(request["path"], options, workdir, layers)
    except BaseException as exc:  # noqa: BLE001 - report, never a traceback from gradguard
        result = ProbeResult(request.get("path", "?"), model.FAILED, f"internal error in the probe: {exc!r}")
        status = 1
    try:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        if not armed:
            _write_all(out_fd, b'{"armed": {}}\n')
        if workdir is not None:
            result.stdout = _tail(os.path.join(workdir, "stdout.txt"))
            result.stderr = _tail(os.path.join(workdir, "stderr.txt"))
        _write_all(out_fd, (json.dumps(result.to_json()) + "\n").encode())
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


def _tree_memory(child: int) -> int:
    """Bytes the probe's tree holds: the PSS of every process in the PID namespace but the worker (pid 1),
    and what its private /tmp and /dev/shm hold."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        try:
            with open(f"/proc/{name}/smaps_rollup", "rb") as f:
                for line in f:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError):
            pass
    for folder in ("/tmp", "/dev/shm"):
        try:
            st = os.statvfs(f"/proc/{child}/root{folder}")
        except OSError:
            continue
        if st.f_flag & os.ST_RDONLY == 0:
            total += (st.f_blocks - st.f_bfree) * st.f_frsize
    return total


def _kill_tree(pid: int, sandbox: dict) -> None:
    """Every process the probe left: in a PID namespace whose init we are, all of them; else the child's group."""
    if sandbox.get("pid_namespace"):
        try:
            os.kill(-1, signal.SIGKILL)  # from a namespace's init: every process in it but ourselves
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if done == 0:
                time.sleep(0.01)
    else:
        _kill_group(pid, signal.SIGKILL)


_CHECKED = ("capabilities_dropped", "no_new_privs", "seccomp")


def handle(request: dict, base: str, serial: int, sandbox: dict) -> dict:
    from .sandbox import kernel_view, locked_down

    options = ProbeOptions.from_json(request["options"])
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    started = time.monotonic()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(request, write_fd, sandbox, base, serial, parent)
    os.close(write_fd)
    buffer = b""
    lines: list[bytes] = []
    deadline = started + options.timeout
    timed_out = False
    killed_at = None
    exit_status = None
    over_memory = None
    layers = None
    watch = bool(sandbox.get("memory_tree") and options.memory_mb)
    limit = (options.memory_mb or 0) * 1024 * 1024
    eof = False
    while len(lines) < 2:
        now = time.monotonic()
        if not timed_out and now >= deadline:
            timed_out = True
            _kill_group(pid, signal.SIGTERM)
            killed_at = now
        if timed_out and now >= killed_at + GRACE_S:
            _kill_tree(pid, sandbox)
            break
        if exit_status is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                exit_status = status
        if watch and exit_status is None:
            used = _tree_memory(pid)
            if used > limit:
                over_memory = used
                _kill_tree(pid, sandbox)
                break
        wait = (deadline if not timed_out else killed_at + GRACE_S) - now
        ready, _, _ = select.select([read_fd], [], [], 0.0 if exit_status is not None else max(0.0, min(wait, 0.2)))
        if ready:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                eof = True
                break
            buffer += chunk
            while b"\n" in buffer and len(lines) < 2:
                line, _, buffer = buffer.partition(b"\n")
                lines.append(line)
            if lines and layers is None:
                layers = _armed(lines[0], pid, kernel_view, locked_down)
        elif exit_status is not None:
            break  # the child is gone; a descendant holding the pipe open does not make this a timeout
    os.close(read_fd)
    if exit_status is None and not eof and len(lines) == 2:
        end = time.monotonic() + GRACE_S  # the child writes its result, then exits
        while exit_status is None and time.monotonic() < end:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                exit_status = status
            else:
                time.sleep(0.01)
    if exit_status is None:
        _kill_group(pid, signal.SIGKILL)
        try:
            _, exit_status = os.waitpid(pid, 0)
        except ChildProcessError:
            exit_status = 0
    _kill_tree(pid, sandbox)  # whatever the script started, daemons included
    shutil.rmtree(os.path.join(base, f"run-{serial}"), ignore_errors=True)
    elapsed = time.monotonic() - started
    box = dict(sandbox, **(layers or {}))
    try:
        result = json.loads(lines[1]) if len(lines) == 2 else None
        if result is not None:
            if result.get("path") != request["path"]:
                raise ValueError("a result for another file")
            ProbeResult.from_json(result)
    except (ValueError, TypeError, KeyError, AttributeError):
        result = ProbeResult(request["path"], model.CRASHED, "the probed process wrote a malformed result",
                             device=options.device).to_json()
    if over_memory is not None:
        result = ProbeResult(request["path"], model.MEMORY,
                             f"the probe's processes used {over_memory // 2**20} MB (their memory, /tmp and /dev/shm "
                             f"together) over the {options.memory_mb} MB limit, and were killed",
                             device=options.device).to_json()
    elif result is None:
        if timed_out:
            result = ProbeResult(request["path"], model.TIMEOUT,
                                 f"killed after the {options.timeout:g} s timeout (it did not stop on SIGTERM)",
                                 device=options.device).to_json()
        else:
            how = (f"was killed by {_signal_name(os.WTERMSIG(exit_status))}" if os.WIFSIGNALED(exit_status)
                   else f"exited with status {os.WEXITSTATUS(exit_status)} without a result")
            hint = ""
            if os.WIFSIGNALED(exit_status) and os.WTERMSIG(exit_status) in (signal.SIGKILL, signal.SIGABRT,
                                                                              signal.SIGSEGV):
                hint = f" (possibly out of memory under the {options.memory_mb} MB limit)" if options.memory_mb else ""
            result = ProbeResult(request["path"], model.CRASHED, f"the probed process {how}{hint}",
                                 device=options.device).to_json()
    elif timed_out and result.get("status") not in (model.TIMEOUT,):
        result["status"] = model.TIMEOUT
        result["detail"] = f"stopped after the {options.timeout:g} s timeout; findings up to that point are reported"
    # What the sandbox was is the worker's word: the layers it set up, the child's report from before the
    # user's code ran, checked against the kernel.  Not what the result says.
    claimed = result.get("sandbox") if isinstance(result.get("sandbox"), dict) else {}
    kept = {k: claimed[k] for k in ("memory_mb", "memory_note", "timeout_s", "tracer_errors") if k in claimed}
    result["sandbox"] = dict(box, **kept, audit_guard=True)
    if options.memory_mb and "memory_mb" not in kept and over_memory is not None:
        result["sandbox"]["memory_mb"] = options.memory_mb
    result["sandbox"]["layers"] = {name: bool(box.get(name)) for name in REQUIRED} if options.isolate else {}
    result["total_seconds"] = elapsed
    return result


def _armed(line: bytes, pid: int, kernel_view, locked_down) -> dict:
    """The child's report from before the user's code ran, with the kernel's word on what it can check."""
    try:
        layers = json.loads(line)["armed"]
        if not isinstance(layers, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        return {}
    seen = locked_down(kernel_view(pid))
    for name in _CHECKED:
        if layers.get(name) and not seen.get(name):
            layers[name] = False
            layers[name + "_note"] = "not confirmed by /proc"
    return layers


def _ns_differs(kind: str, parent_inode: str | None) -> bool:
    if not parent_inode:
        return False
    try:
        return str(os.stat(f"/proc/self/ns/{kind}").st_ino) != parent_inode
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
    parser.add_argument("--isolated", "--read-only", action="store_true", dest="isolated",
                        help="set up the sandbox's mounts (needs a mount namespace; see sandbox.py)")
    parser.add_argument("--parent-netns", default=None)
    parser.add_argument("--parent-userns", default=None)
    args = parser.parse_args(argv)

    # The PID namespace's /proc replaces the host's below: read the namespaces first.
    sandbox: dict = {"isolated": args.isolated, "network_namespace": _ns_differs("net", args.parent_netns),
                     "user_namespace": _ns_differs("user", args.parent_userns), "pid_namespace": os.getpid() == 1,
                     "read_only_files": False}
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # stray prints (ours or a library's) must not corrupt the protocol
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    if args.isolated:
        from .sandbox import setup_worker_mounts

        try:
            sandbox.update(setup_worker_mounts(os.path.realpath(args.base)))
        except OSError as exc:
            sandbox["read_only_files_note"] = str(exc)
    sandbox["memory_tree"] = bool(sandbox["pid_namespace"] and sandbox.get("private_proc"))
    if not sandbox["pid_namespace"]:
        sandbox["pid_namespace_note"] = "no PID namespace: a daemon that leaves the process group survives"
    try:
        info = warm_imports()
    except Exception as exc:  # noqa: BLE001 - torch missing or broken: say so
        error = (f"cannot import torch: {exc} (the probe runs your code with {sys.executable}: install torch "
                 f"there, e.g. `{sys.executable} -m pip install torch==2.13.0`, the version gradguard is tested with)")
        protocol.write(json.dumps({"ready": False, "error": error}) + "\n")
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
