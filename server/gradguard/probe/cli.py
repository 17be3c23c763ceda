"""``gradguard probe PATH`` and ``gradguard check --probe``; ``gradguard.cli`` registers both.

Exit codes of ``probe``: 1 when it reports a finding; 2 when it could not run the target or the run
did not finish (failed, timed out, out of memory, crashed) and found nothing; 0 otherwise (the
script ran, exited or raised an unrelated error, and nothing broke autograd).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from ..diagnostics import FileResult
from ..errors import UsageError
from . import model
from .model import ProbeOptions, ProbeResult


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if not number > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {value!r}")
    return number


def _megabytes(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected a number of megabytes (0: no limit), got {value!r}")
    return number


def _add_options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    parser.add_argument("--device", choices=model.DEVICES, default="cpu" if defaults else None,
                        help="where tensors are made: cpu (default), cuda, or auto (cuda when available)")
    parser.add_argument("--timeout", type=_positive_float, default=model.DEFAULT_TIMEOUT_S if defaults else None,
                        metavar="S", help=f"wall-clock seconds per file (default: {model.DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--memory-mb", type=_megabytes, default=model.DEFAULT_MEMORY_MB if defaults else None,
                        metavar="N",
                        help=f"address-space limit of the probed process in MB, 0 for none "
                             f"(default: {model.DEFAULT_MEMORY_MB}; torch itself maps ~2 GB)")
    parser.add_argument("--entry", metavar="FUNC",
                        help="import the file and call FUNC() instead of running it as __main__")
    parser.add_argument("--probe-args", metavar="ARGS",
                        help="arguments for the script, split as a shell would (shlex): its sys.argv[1:] "
                             "(e.g. --probe-args \"--epochs 1 --cpu\")")
    parser.add_argument("--no-isolation", action="store_true",
                        help="NO PROTECTION: run the code with your user's rights, without namespaces, seccomp or "
                             "read-only files (only a Python audit hook, which any C code gets past). Only for "
                             "code you trust; docs/security.md")
    parser.add_argument("--allow-missing-layers", action="store_true",
                        help="run even where the kernel refuses a layer of the sandbox (the probe names the missing "
                             "layers; without this flag it refuses to run)")


def add_probe_command(commands) -> None:
    probe = commands.add_parser(
        "probe", help="run a file under a tracer and report the autograd-breaking mutations it performs",
        description="Run PATH in a sandboxed subprocess under a tracer (torch required) and report each "
                    "mutation that breaks autograd, with the line that saved the tensor and the backward "
                    "that fails. PATH::FUNC is short for --entry FUNC. A file inside a package (its folder has "
                    "__init__.py) runs as `python -m pkg.mod` from the folder above the top package.")
    probe.add_argument("path", metavar="PATH")
    probe.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    _add_options(probe, defaults=True)
    probe.set_defaults(handler=run_probe)


def add_check_options(check: argparse.ArgumentParser) -> None:
    group = check.add_argument_group("runtime probe (only with --probe)")
    group.add_argument("--probe", action="store_true",
                       help="also run every file that can run under the runtime probe (scripts as `python FILE`, "
                            "modules inside packages as `python -m pkg.mod` from the package root), whether or "
                            "not it has findings, and merge what it sees; each file's outcome is reported "
                            "(runs your code: sandboxed; --jobs workers at most "
                            f"{PROBE_MAX_JOBS})")
    _add_options(group, defaults=False)


def options_from(args: argparse.Namespace, lines: Sequence[int] = ()) -> ProbeOptions:
    memory = args.memory_mb if args.memory_mb is not None else model.DEFAULT_MEMORY_MB
    return ProbeOptions(
        device=args.device or "cpu",
        timeout=args.timeout or model.DEFAULT_TIMEOUT_S,
        memory_mb=memory or None,
        entry=args.entry,
        lines=tuple(sorted(set(lines))),
        argv=tuple(probe_args(args)),
        isolate=not args.no_isolation,
        allow_missing_layers=bool(getattr(args, "allow_missing_layers", False)),
    )


def probe_args(args: argparse.Namespace) -> list[str]:
    """``--probe-args "ARGS"`` split as a POSIX shell would; a usage error when it cannot be split."""
    text = getattr(args, "probe_args", None)
    if not text:
        return []
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"--probe-args {text!r}: {exc}") from None


def _protections(result: ProbeResult) -> str:
    box = result.sandbox
    layers = box.get("layers")
    if not layers:
        return "NONE (--no-isolation: Python audit hook only)" + (
            ", files checked afterwards" if "changed_files" in box else "")
    missing = [name for name, on in layers.items() if not on]
    if not missing:
        parts = ["all layers (user, network, PID and mount namespaces, read-only files, private /tmp, "
                 "no capabilities, seccomp, allow-listed environment, tree-wide limits)"]
    else:
        parts = ["MISSING " + ", ".join(missing)]
    if box.get("memory_mb"):
        parts.append(f"{box['memory_mb']} MB")
    return ", ".join(parts)


def describe(result: ProbeResult, display: str) -> list[str]:
    """The human lines about how a run went (stderr)."""
    lines = [f"probe: {display}: {result.status}: {result.detail}"]
    if result.status not in (model.FAILED,):
        lines.append(f"probe: device {result.device}; sandbox: {_protections(result) or 'none'}")
    for what in result.blocked:
        lines.append(f"probe: blocked: {what}")
    changed = result.sandbox.get("changed_files")
    if changed:
        lines.append("probe: these files changed while the probe ran: " + ", ".join(changed))
    return lines


def _summary_json(result: ProbeResult) -> dict:
    data = result.to_json()
    del data["findings"]
    return data


def run_probe(args: argparse.Namespace) -> int:
    from . import merge
    from .runner import probe_file

    path = args.path
    if not os.path.exists(path) and "::" in path:
        path, _, entry = path.rpartition("::")
        if args.entry and args.entry != entry:
            raise UsageError(f"{args.path} and --entry {args.entry} name different functions")
        args.entry = entry
    if not os.path.isfile(path):
        raise UsageError(f"not a file: {path}")
    from .target import package_of

    options = options_from(args)
    module, root = package_of(path)
    if module and os.path.basename(path) != "__init__.py":  # as `python -m pkg.mod`: relative imports work
        options = replace(options, module=module, module_root=root, roots=(root,))
    result = probe_file(path, options)
    found = merge.diagnostics(result, path)
    if args.format == "json":
        sys.stdout.write(json.dumps({"version": 1, "diagnostics": [d.to_json() for d in found],
                                     "probe": _summary_json(result)}, indent=2) + "\n")
    else:
        from ..output import text

        sys.stdout.write(text.render(found))
    for line in describe(result, path):
        print(line, file=sys.stderr)
    if found:
        return 1
    return 2 if result.status in model.INCOMPLETE else 0


def _explicit_files(paths: Sequence[str]) -> set[str]:
    return {os.path.realpath(p) for p in paths if p != "-" and os.path.isfile(p)}


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 10 else f"{value:.0f} s"


def outcome_of(result: ProbeResult, display: str, how: str) -> model.FileOutcome:
    """How one probed file's run ended, as ``check --probe`` states it."""
    took = result.seconds or result.total_seconds
    status = result.status
    if status == model.COMPLETED or (status == model.EXITED and not result.exit_code):
        detail = f"ran to the end ({how}, {_seconds(took)})"
        if status == model.EXITED:
            detail = f"ran to the end: it called sys.exit() ({how}, {_seconds(took)})"
        elif result.ops == 0:
            detail += "; no tensor operation ran"
        return model.FileOutcome(display, model.RAN, detail, how, None, status, took)
    if status == model.EXITED:
        return model.FileOutcome(
            display, model.STOPPED, f"stopped: {result.detail} ({how}), so the probe could not confirm anything "
                                    f"after it", how, None, status, took)
    if status == model.RAISED:
        exc = result.exception or {}
        line = exc.get("line")
        where = f"at line {line}" if line else "at an unknown line"
        other = exc.get("path")
        if line and other and os.path.realpath(other) != os.path.realpath(result.path):
            try:
                where = f"at {os.path.relpath(other)}:{line}"
            except ValueError:
                where = f"at {other}:{line}"
        if exc.get("finding"):
            return model.FileOutcome(display, model.STOPPED_BY_FINDING,
                                     f"stopped {where} by the autograd error reported ({exc.get('type')}; {how})",
                                     how, line, status, took)
        message = " ".join(str(exc.get("message", "")).split())[:200]
        return model.FileOutcome(
            display, model.STOPPED,
            f"stopped {where} by {exc.get('type', 'an exception')}: {message} -- not an autograd error the probe "
            f"recognises, so it could not confirm the code after it ({how})", how, line, status, took)
    if status == model.TIMEOUT:
        return model.FileOutcome(display, model.TIMED_OUT,
                                 f"timed out after {result.sandbox.get('timeout_s') or took:g} s; findings up to that "
                                 f"point are reported ({how})", how, None, status, took)
    return model.FileOutcome(display, model.DID_NOT_RUN, f"did not run to its end ({status}): {result.detail}",
                             how, None, status, took)


def _not_run(display: str, outcome: str, why: str) -> model.FileOutcome:
    return model.FileOutcome(display, outcome, f"not run: {why}")


def _dedupe(results: list[FileResult]) -> list[FileResult]:
    """One finding per (file, line, code) over all files: running a package's modules can see the same write
    from two of them, and a probe finding in a module it imported repeats that module's static one.  The
    probe's version (confirmed, with torch's message) is kept."""
    from .merge import ProbedDiagnostic

    best: dict[tuple, tuple[int, object]] = {}
    for r in results:
        for d in r.diagnostics:
            key = (d.path, d.cell, d.span.line, d.code)
            rank = 2 if isinstance(d, ProbedDiagnostic) and d.confirmed else 1 if isinstance(d, ProbedDiagnostic) else 0
            if key not in best or rank > best[key][0]:
                best[key] = (rank, d)
    kept = {id(d) for _, d in best.values()}
    return [replace(r, diagnostics=[d for d in r.diagnostics if id(d) in kept]) for r in results]


PROBE_MAX_JOBS = 4  # each worker holds torch (~0.7 GB of address space); more rarely helps


def probe_results(results: list[FileResult], targets, paths: Sequence[str],
                  args: argparse.Namespace) -> tuple[list[FileResult], list[model.FileOutcome]]:
    """``check --probe``: run every file that can run -- scripts as ``python FILE``, modules inside packages
    as ``python -m pkg.mod`` from their package root -- whether or not the static analysis found anything,
    in sandboxed warm workers (at most ``--jobs``, and ``PROBE_MAX_JOBS``), and merge each file's result into
    the static findings.

    Also returns one ``FileOutcome`` per file asked for: ran to the end, stopped at a line, timed out, did
    not run, not run (no entry point, a notebook, stdin).  ``check`` calls the run clean only when every
    outcome ``passes``."""
    import concurrent.futures
    import queue
    import threading

    from ..notebooks import is_notebook
    from . import merge
    from .runner import ProbeWorker, probe_file
    from .target import MODULE, NO_ENTRY, runnable

    explicit = _explicit_files(paths)
    real = {t.display: t.path for t in targets}
    outcomes: dict[int, model.FileOutcome] = {}
    plans: list[tuple[FileResult, ProbeOptions, str]] = []
    for r in results:
        path = real.get(r.path)
        if path is None:
            outcomes[id(r)] = _not_run(r.path, model.NOT_RUN, "source read from stdin is not probed")
        elif is_notebook(r.path):
            outcomes[id(r)] = _not_run(r.path, model.NOT_RUN, "the probe does not run notebooks")
        elif r.error is not None:
            outcomes[id(r)] = _not_run(r.path, model.NOT_RUN, f"it could not be analysed ({r.error})")
        else:
            named = os.path.realpath(path) in explicit
            how = runnable(str(path), args.entry)
            if how.kind == NO_ENTRY and not (named and args.entry):
                outcomes[id(r)] = _not_run(r.path, model.NO_ENTRY, f"no entry point: {how.why}")
                continue
            if not how.runs and not (named and args.entry):
                outcomes[id(r)] = _not_run(r.path, model.NOT_RUN, how.why)
                continue
            calls = args.entry if args.entry and (named or _defines(str(path), args.entry)) else None
            options = options_from(args, [d.line for d in r.diagnostics if d.path == r.path])
            module = how.module if how.kind == MODULE else None
            if module:
                options = replace(options, module=module, module_root=how.root, roots=(how.root,))
            options = replace(options, entry=calls)
            shown = (f"python -m {module}" if module else f"python {os.path.basename(str(path))}") + (
                f" {shlex.join(options.argv)}" if options.argv else "") + (f", calling {calls}()" if calls else "")
            plans.append((r, options, shown))

    merged: dict[int, FileResult] = {}
    lock = threading.Lock()
    if plans:
        jobs = max(1, min(getattr(args, "jobs", 1) or 1, len(plans), PROBE_MAX_JOBS))
        isolate = plans[0][1].isolate
        first = ProbeWorker(isolate=isolate)
        workers = [first]
        pool: queue.Queue = queue.Queue()
        try:
            first.start()  # raises WorkerError (no torch...): the probe asked for cannot run at all
            pool.put(first)
            for _ in range(jobs - 1):
                extra = ProbeWorker(isolate=isolate)  # started on its first probe
                workers.append(extra)
                pool.put(extra)

            def run(plan):
                r, options, shown = plan
                worker = pool.get()
                try:
                    result = probe_file(Path(real[r.path]), options, worker=worker)
                finally:
                    pool.put(worker)
                diagnostics = merge.merge(r.diagnostics, result, r.path)
                tally = merge.counts(diagnostics, len(r.diagnostics))
                outcome = outcome_of(result, r.path, shown)
                with lock:
                    merged[id(r)] = replace(r, diagnostics=diagnostics)
                    outcomes[id(r)] = outcome
                    for line in describe(result, r.path):
                        print(line, file=sys.stderr)
                    print(f"probe: {r.path}: {tally['confirmed']} confirmed, {tally['added']} added, "
                          f"{tally['unconfirmed']} not confirmed", file=sys.stderr)

            executor = concurrent.futures.ThreadPoolExecutor(jobs)
            try:
                for future in [executor.submit(run, plan) for plan in plans]:
                    future.result()
            finally:  # on Ctrl-C too: queued files are dropped, and the workers (with their runs) killed below
                executor.shutdown(wait=False, cancel_futures=True)
        finally:
            for worker in workers:
                worker.close()
    final = _dedupe([merged.get(id(r), r) for r in results])
    order = sorted(results, key=lambda r: r.path)
    return final, [outcomes[id(r)] for r in order]


def _defines(path: str, entry: str) -> bool:
    """Whether ``path`` defines ``entry``'s first name at its top level (``--entry`` is called there)."""
    import ast

    from .target import TargetError, read_source

    try:
        tree = ast.parse(read_source(path), path)
    except (TargetError, SyntaxError, ValueError):
        return False
    name = entry.split(".")[0]
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name:
            return True
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            return True
    return False


def check_probe_usage(args: argparse.Namespace) -> str | None:
    """Why the probe options given to ``check`` make no sense, or None."""
    if args.probe:
        return None
    given = [name for name in ("device", "timeout", "memory_mb", "entry", "probe_args")
             if getattr(args, name, None) is not None]
    flags = [name for name in ("no_isolation", "allow_missing_layers") if getattr(args, name, False)]
    if given or flags:
        shown = ", ".join("--" + g.replace("_", "-") for g in given + flags)
        return f"{shown} only apply with --probe"
    return None
