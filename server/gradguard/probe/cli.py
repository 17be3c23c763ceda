"""``gradguard probe PATH`` and ``gradguard check --probe``; ``gradguard.cli`` registers both.

Exit codes of ``probe``: 1 when it reports a finding; 2 when it could not run the target or the run
did not finish (failed, timed out, out of memory, crashed) and found nothing; 0 otherwise (the
script ran, exited or raised an unrelated error, and nothing broke autograd).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
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
                    "that fails. PATH::FUNC is short for --entry FUNC.")
    probe.add_argument("path", metavar="PATH")
    probe.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    _add_options(probe, defaults=True)
    probe.set_defaults(handler=run_probe)


def add_check_options(check: argparse.ArgumentParser) -> None:
    group = check.add_argument_group("runtime probe (only with --probe)")
    group.add_argument("--probe", action="store_true",
                       help="also run the files named on the command line, and the files with findings, under "
                            "the runtime probe, and merge what it sees (runs your code: sandboxed)")
    _add_options(group, defaults=False)


def options_from(args: argparse.Namespace, lines: Sequence[int] = ()) -> ProbeOptions:
    memory = args.memory_mb if args.memory_mb is not None else model.DEFAULT_MEMORY_MB
    return ProbeOptions(
        device=args.device or "cpu",
        timeout=args.timeout or model.DEFAULT_TIMEOUT_S,
        memory_mb=memory or None,
        entry=args.entry,
        lines=tuple(sorted(set(lines))),
        isolate=not args.no_isolation,
        allow_missing_layers=bool(getattr(args, "allow_missing_layers", False)),
    )


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
    result = probe_file(path, options_from(args))
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


def probe_results(results: list[FileResult], targets, paths: Sequence[str],
                  args: argparse.Namespace) -> tuple[list[FileResult], list[str]]:
    """``check --probe``: probe the files named on the command line and the files with findings, one
    warm worker for all of them, and merge each file's result into its static findings.

    Also returns the files whose run did not finish (timed out, out of memory, crashed, failed): the
    probe saw only part of them, so ``check`` must not call them clean."""
    from . import merge
    from .runner import ProbeWorker, probe_file

    explicit = _explicit_files(paths)
    real = {t.display: t.path for t in targets}
    chosen = [r for r in results if r.error is None and r.path in real and str(real[r.path]).endswith(".py")
              and (r.diagnostics or os.path.realpath(real[r.path]) in explicit)]
    if not chosen:
        print("probe: no file to probe (name files, or files with findings are probed)", file=sys.stderr)
        return results, []
    merged: dict[int, FileResult] = {}
    unfinished: list[str] = []
    first = options_from(args)
    with ProbeWorker(isolate=first.isolate) as worker:
        for r in chosen:
            options = options_from(args, [d.line for d in r.diagnostics])
            result = probe_file(Path(real[r.path]), options, worker=worker)
            diagnostics = merge.merge(r.diagnostics, result, r.path)
            tally = merge.counts(diagnostics, len(r.diagnostics))
            merged[id(r)] = FileResult(r.path, diagnostics, r.error)
            if result.status in model.INCOMPLETE:
                unfinished.append(r.path)
            for line in describe(result, r.path):
                print(line, file=sys.stderr)
            print(f"probe: {r.path}: {tally['confirmed']} confirmed, {tally['added']} added, "
                  f"{tally['unconfirmed']} not confirmed", file=sys.stderr)
    return [merged.get(id(r), r) for r in results], unfinished


def check_probe_usage(args: argparse.Namespace) -> str | None:
    """Why the probe options given to ``check`` make no sense, or None."""
    if args.probe:
        return None
    given = [name for name in ("device", "timeout", "memory_mb", "entry") if getattr(args, name) is not None]
    flags = [name for name in ("no_isolation", "allow_missing_layers") if getattr(args, name, False)]
    if given or flags:
        shown = ", ".join("--" + g.replace("_", "-") for g in given + flags)
        return f"{shown} only apply with --probe"
    return None
