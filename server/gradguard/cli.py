"""``gradguard check | rules | rule CODE``: a thin shell over ``gradguard.api``.

The exit code is the contract CI relies on, and it never claims more than was checked:

- 0: every file asked for was analysed and no finding is at or above ``--fail-level`` (an empty
  ``--files-from`` list asks for nothing, so it checks nothing and exits 0, saying so);
- 1: a finding at or above ``--fail-level`` exists (with ``--fix``: one is left; with ``--diff``: one
  would be left, or there is a diff to apply, as in ruff);
- 2: gradguard could not do what was asked: bad usage, bad config, an unknown rule code in
  ``--select``/``--ignore``/``--severity`` or ``[tool.gradguard]``, a path that does not exist (or is a
  symlink loop), folders with no Python file or notebook in them, ``--fix`` unable to write a file back
  (its findings are still reported), ``--probe`` without torch or (when no finding makes it 1) a file asked for that the
  probe did not run to its end (stopped by an error that is not an autograd one, timed out, could not run, a
  notebook: each file's outcome is in the report), or an internal error in a file.  Whatever
  was found is still reported, and the closing line never says "All checks passed." then.

Bad *input* files never stop the run: each becomes one finding.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from . import __version__
from . import baseline as baselines
from .diagnostics import Diagnostic, FileResult, Severity
from .errors import ConfigError, UsageError
from .output import FORMATS, catalog, render
from .output import text as text_output

# The analysis (``config`` reads the rules, and they the engine and the fix package) is imported by the commands
# that run it, not here: `gradguard lsp` imports it after the server's generated-code cache is in place
# (``lsp/generated_code.py``), so the analysis's dataclasses are taken compiled from it at each start.
if TYPE_CHECKING:  # pragma: no cover
    from .config import Config
    from .files import Target
    from .autofix.writer import FixRun

PROGRESS_MIN_FILES = 20
MAX_JOBS = 32  # --jobs above this is capped: more processes only cost memory (each holds an analysis)
MAX_PROBE_TIMEOUT_S = 86_400.0  # a day: past it a timeout is a typo (1e12 overflowed the event loop's poll)
INTERRUPTED = 130  # the shell's code for a run stopped by SIGINT


# --- arguments ---------------------------------------------------------------


def _codes(value: str) -> list[str]:
    return [c.strip().upper() for c in value.split(",") if c.strip()]


def _severity_override(value: str) -> tuple[str, Severity]:
    from .config import parse_severity  # the analysis, for the commands that run it (see the imports)

    code, sep, level = value.partition("=")
    if not sep or not code.strip():
        raise argparse.ArgumentTypeError(f"expected CODE=LEVEL, got {value!r}")
    try:
        return code.strip().upper(), parse_severity(level.strip())
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value!r}")
    return n


def _jobs(value: str) -> int:
    return min(_positive_int(value), MAX_JOBS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gradguard", description="Find PyTorch code that breaks autograd through in-place mutation."
    )
    parser.add_argument("--version", action="version", version=f"gradguard {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = commands.add_parser("check", help="analyse files and folders")
    check.add_argument("paths", nargs="*", default=[], metavar="PATH",
                       help="files, folders and notebooks (default: .); - reads source from stdin")
    check.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    check.add_argument("--select", type=_codes, metavar="CODES", help="comma-separated code prefixes to enable")
    check.add_argument("--ignore", type=_codes, metavar="CODES", help="comma-separated code prefixes to disable")
    check.add_argument(
        "--extend-ignore", type=_codes, default=[], metavar="CODES", help="add to the configured ignore list"
    )
    check.add_argument(
        "--severity", type=_severity_override, action="append", default=[], metavar="CODE=LEVEL",
        help="override a rule's severity (error, warning, info); repeatable",
    )
    check.add_argument(
        "--fail-level", choices=[s.value for s in Severity], default="warning",
        help="lowest severity that makes the exit code 1 (default: warning)",
    )
    check.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    check.add_argument("--output-file", metavar="FILE", help="write the report to FILE instead of stdout")
    check.add_argument("--statistics", action="store_true", help="print counts per rule instead of findings")
    check.add_argument("--config", metavar="PATH", help="use this pyproject.toml instead of discovering one")
    check.add_argument("--stdin-filename", metavar="NAME", help="the name to report for source read from -")
    check.add_argument("--jobs", type=_jobs, default=min(os.cpu_count() or 1, MAX_JOBS), metavar="N",
                       help=f"processes to analyse with (default: all cores; at most {MAX_JOBS}; with 1, one at a "
                            "time, replaced as its memory grows)")
    check.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    check.add_argument("--jedi", action=argparse.BooleanOptionalAction, default=None,
                       help="ask jedi what helpers imported from other modules return (slower; default: the "
                            "`jedi` setting of [tool.gradguard], off)")
    check.add_argument("--quiet", "-q", action="store_true", help="print findings only: no summary, no progress")
    check.add_argument("--fix", action="store_true", help="apply the safe fixes to the files, then report what is left")
    check.add_argument("--unsafe-fixes", action="store_true", help="with --fix or --diff, also apply unsafe fixes")
    check.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; change no file")
    check.add_argument("--files-from", metavar="FILE",
                       help="also analyse the paths listed in FILE, one a line (or NUL-separated); - reads stdin")
    check.add_argument("--no-cache", action="store_true",
                       help="neither read nor write the result cache (.gradguard_cache/, see docs/cli.md)")
    check.add_argument("--baseline", metavar="FILE",
                       help="report only findings not recorded in FILE (default: the `baseline` setting of "
                            "[tool.gradguard])")
    check.add_argument("--write-baseline", metavar="FILE",
                       help="record every finding in FILE as a baseline (then only new ones are reported)")
    check.set_defaults(handler=_check)
    from .probe.cli import add_check_options, add_probe_command  # no torch: that is in the probe's worker

    add_check_options(check)

    rules = commands.add_parser("rules", help="list every rule")
    rules.set_defaults(handler=_rules)

    rule = commands.add_parser("rule", help="print a rule's documentation")
    rule.add_argument("code", metavar="CODE")
    rule.set_defaults(handler=_rule)

    lsp = commands.add_parser("lsp", help="run the language server on stdin/stdout")
    lsp.set_defaults(handler=_lsp)

    add_probe_command(commands)
    return parser


def _lsp(args: argparse.Namespace) -> int:
    from .lsp.main import main as serve  # imported here: pygls is only needed by the server

    return serve()  # 0 after shutdown then exit, 1 on exit without shutdown


# --- configuration -----------------------------------------------------------


def _config(args: argparse.Namespace) -> Config:
    from .config import check_codes, load_config, load_config_file  # the analysis (see the imports)

    check_codes(args.select or (), "--select")
    check_codes(args.ignore or (), "--ignore")
    check_codes(args.extend_ignore, "--extend-ignore")
    check_codes([code for code, _ in args.severity], "--severity", prefixes=False)
    if args.config:
        base = load_config_file(Path(args.config))
    else:
        starts = [os.path.abspath(p) for p in args.paths if p != "-"]
        if not starts and args.stdin_filename:
            starts = [os.path.abspath(args.stdin_filename)]
        try:
            start = Path(os.path.commonpath(starts)) if starts else Path.cwd()
        except ValueError:  # paths on different drives
            start = Path.cwd()
        base = load_config(start)
    config = base.with_overrides(
        select=args.select, ignore=args.ignore, extend_ignore=args.extend_ignore, severity=dict(args.severity)
    )
    if args.baseline:
        try:
            config = replace(config, baseline=baselines.load(Path(args.baseline), config.root))
        except baselines.BaselineError as exc:
            raise UsageError(str(exc)) from None
    return replace(config, jedi=args.jedi) if args.jedi is not None else config


def _baseline_usage(args: argparse.Namespace) -> str | None:
    """Why --write-baseline cannot run with the other options given, if it cannot."""
    if not args.write_baseline:
        return None
    clash = [name for name, on in (("--baseline", args.baseline), ("--fix", args.fix), ("--diff", args.diff),
                                   ("--probe", args.probe), ("-", "-" in args.paths)) if on]
    return f"--write-baseline records every finding; it does not combine with {clash[0]}" if clash else None


# --- analysis ----------------------------------------------------------------


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, file=sys.stderr, unit="file", leave=False)


def _analyze_stdin(display: str, config: Config) -> FileResult:
    from .api import analyze_bytes

    stream = getattr(sys.stdin, "buffer", None) or sys.stdin
    data = stream.read() if stream is not None else b""
    return analyze_bytes(data.encode() if isinstance(data, str) else data, display, config)


def _analyze_cached(targets: list[Target], config: Config, args: argparse.Namespace, digests: dict[str, str]):
    """Every target analysed in worker processes (``gradguard.batch``), behind the content-hash result cache
    (``gradguard.result_cache``) unless --no-cache: results in no particular order, and internal errors."""
    from .batch import analyze_cached
    from .result_cache import open_cache

    progress = not (args.no_progress or args.quiet)
    cache = None if args.no_cache else open_cache(config)
    bar = _progress(len(targets), progress and len(targets) >= PROGRESS_MIN_FILES and sys.stderr.isatty())
    try:
        return analyze_cached(targets, config, args.jobs, cache, bar.update if bar is not None else lambda n: None,
                              digests)
    finally:
        if bar is not None:
            bar.close()


def _paths(args: argparse.Namespace) -> list[str]:
    """The positional paths plus those ``--files-from`` lists; ``.`` when neither names any."""
    paths = list(args.paths)
    if not args.files_from:
        return paths or ["."]
    if args.files_from == "-" and "-" in paths:
        raise UsageError("--files-from - and - both want stdin")
    try:
        if args.files_from == "-":
            text = sys.stdin.read() if sys.stdin is not None else ""
        else:
            text = Path(args.files_from).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {args.files_from}: {getattr(exc, 'strerror', None) or exc}") from None
    listed = text.split("\0") if "\0" in text else text.splitlines()
    return paths + [p.strip() for p in listed if p.strip()]


# --- commands ----------------------------------------------------------------


def _write(report: str, output_file: str | None) -> None:
    if output_file is None:
        sys.stdout.write(report)
        sys.stdout.flush()
        return
    try:
        Path(output_file).write_text(report, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {output_file}: {exc.strerror or exc}") from None


def _check(args: argparse.Namespace) -> int:
    args.paths = _paths(args)
    if args.statistics and args.format != "text":
        raise UsageError("--statistics only works with --format text")
    from .probe.cli import check_probe_usage

    if check_probe_usage(args):
        raise UsageError(check_probe_usage(args))
    if _baseline_usage(args):
        raise UsageError(_baseline_usage(args))
    config = _config(args)
    # Analysed without the baseline, so the result cache holds every finding; the baseline applies below.
    baseline, config = config.baseline, replace(config, baseline=None)
    from . import api  # noqa: F401 - imported before forking, so workers inherit it instead of importing it
    from .files import MissingPath, discover  # the file walker (and pathspec): not for `gradguard lsp`
    from .fixes import unavailable as fixes_unavailable

    paths = [p for p in args.paths if p != "-"]
    if (args.fix or args.diff) and "-" in args.paths:
        raise UsageError("--fix and --diff work on files, not on stdin")
    if (args.fix or args.diff) and fixes_unavailable() is not None:
        raise UsageError(f"fixes are unavailable: {fixes_unavailable()}")
    try:
        targets = discover(paths, config)
    except MissingPath as exc:
        raise UsageError(str(exc)) from None
    if paths and not targets:
        raise UsageError(_nothing_found(paths, config))

    digests: dict[str, str] = {}  # display -> digest of the bytes its result is the analysis of
    results, crashes = _analyze_cached(targets, config, args, digests)
    runs = None  # --probe: each file's outcome (ran to the end, stopped at a line, timed out, not run)
    unprobed: list = []  # files the probe did not run to their end and that have an entry point
    if "-" in args.paths:
        display = args.stdin_filename or "-"
        try:
            results.append(_analyze_stdin(display, config))
        except Exception as exc:  # noqa: BLE001 - a bug, reported as _analyze_chunk reports one
            crashes.append(f"internal error while analysing {display}: {type(exc).__name__}: {exc}")
    files = {t.display: t.path for t in targets}
    if args.write_baseline:
        return _write_baseline(args, results, files, config, len(targets), crashes)
    hidden, unmatched = 0, []
    if baseline is not None:
        results, hidden, unmatched = _apply_baseline(baseline, results, files)
        config = replace(config, baseline=baseline)  # --fix leaves the findings it hides alone, as the editor does
    if args.probe:
        from .probe.cli import probe_results
        from .probe.runner import WorkerError

        try:
            results, runs = probe_results(results, targets, paths, args)
            unprobed = [run for run in runs if not run.passes]
        except WorkerError as exc:  # no torch, or no process can start: the probe the user asked for cannot run
            raise UsageError(f"cannot run the probe: {exc}") from None
    # After the probe, whose merge matches each run file's static findings, wherever they are, with its own.
    origins = {}  # --fix: the files whose analyses place findings in another (their fixes edit it)
    if args.fix or args.diff:
        from .autofix.writer import placed_origins

        origins = placed_origins(results)
    results = in_own_files(results)
    if args.probe:
        from .probed_fixes import attach

        # the fixes of the findings only the probe made, each read in its own file (a module the entry file imports)
        results = attach(results, files)
    fixing = None
    if args.fix or args.diff:
        from .autofix.writer import run_fixes  # .py files have their text fixed; notebooks their cells

        fixing = run_fixes(results, files, config, args.unsafe_fixes, not args.diff, digests, origins)
        results = fixing.results

    diagnostics: list[Diagnostic] = sorted(
        (d for r in results for d in r.diagnostics),
        key=lambda d: d.order,
    )
    rules = catalog(config.docs_url)
    if args.diff:
        report = fixing.diff
    elif args.statistics:
        report = text_output.statistics(diagnostics, rules)
    else:
        report = render(args.format, diagnostics, rules, runs)
    _write(report, args.output_file)

    for crash in crashes:
        print(f"gradguard: {crash}", file=sys.stderr)
    for problem in fixing.problems if fixing is not None else ():
        print(f"gradguard: {problem}", file=sys.stderr)
    if diagnostics and fixes_unavailable() is not None and not args.quiet:
        print(f"gradguard: fixes are unavailable: {fixes_unavailable()}", file=sys.stderr)
    if unmatched and not args.quiet:
        _report_unmatched(unmatched, baseline, args.statistics)
    if not args.quiet:
        checked = len(targets) + ("-" in args.paths)
        print(text_output.summary(diagnostics, checked, _fixing(fixing), len(crashes), len(unprobed), hidden),
              file=sys.stderr)
    if crashes or (fixing is not None and fixing.write_failures):
        return 2
    fail_rank = Severity(args.fail_level).rank
    failed = any(d.severity.rank >= fail_rank for d in diagnostics) or bool(args.diff and fixing.diff)
    if failed and not args.exit_zero:
        return 1
    # --probe: a file asked for that did not run to its end is no pass (--exit-zero is about findings only)
    return 2 if unprobed else 0


def in_own_files(results: list[FileResult]) -> list[FileResult]:
    """Each finding under the file it points to: one an entry file's analysis placed in another module of the
    project (``engine._placed``) joins that file's result (made when the file was not checked itself), once: the
    same finding from several entry files is one (the first in file order keeps its call chain).  Results come
    from the cache as they were analysed, each under its entry file's key, whose project stamp changes when any
    module does (``result_cache``)."""
    results = sorted(results, key=lambda r: r.path)
    by_path = {r.path: r for r in results}
    moved: dict[str, list[Diagnostic]] = {}
    seen: set[tuple] = set()
    for r in results:
        for d in r.diagnostics:
            if d.path != r.path:
                key = (d.path, d.code, d.span.line, d.span.column)
                if key not in seen:
                    seen.add(key)
                    moved.setdefault(d.path, []).append(d)
    if not moved:
        return results
    out = []
    for r in results:
        own = [d for d in r.diagnostics if d.path == r.path]
        taken = {(d.code, d.span.line, d.span.column) for d in own}
        extra = [d for d in moved.pop(r.path, []) if (d.code, d.span.line, d.span.column) not in taken]
        out.append(r if own == r.diagnostics and not extra else replace(r, diagnostics=own + extra))
    out += [FileResult(path, diags) for path, diags in sorted(moved.items())]
    return out


def _apply_baseline(baseline: baselines.Baseline, results: list[FileResult], files: dict[str, Path]):
    """The results without the findings ``baseline`` records, how many it hid, and its entries that match
    no finding of the files checked (files that could not be analysed are not checked)."""
    kept, hidden, checked = [], 0, {}
    for result in results:
        shown = []
        for d in result.diagnostics:  # each under its own file (one placed in another module: that one's)
            if baseline.hides(files.get(d.path, Path(d.path)), d):
                hidden += 1
            else:
                shown.append(d)
        kept.append(replace(result, diagnostics=shown))
    for result in in_own_files(results):
        if result.error is None:
            checked[baselines.relative_path(files.get(result.path, Path(result.path)), baseline.root)] = \
                result.diagnostics
    return kept, hidden, baseline.unmatched(checked)


def _report_unmatched(unmatched: list, baseline: baselines.Baseline, listed: bool) -> None:
    """Entries for findings that are gone: a note (each one with --statistics), never a failure."""
    n = len(unmatched)
    entries = "1 entry matches" if n == 1 else f"{n} entries match"
    print(f"gradguard: {entries} no finding any more in the baseline {baseline.path}; --write-baseline drops them",
          file=sys.stderr)
    if listed:
        for name, entry in unmatched:
            print(f"gradguard:     {name}: {entry.code} (recorded at line {entry.line})", file=sys.stderr)


def _write_baseline(args: argparse.Namespace, results: list[FileResult], files: dict[str, Path], config: Config,
                    checked: int, crashes: list[str]) -> int:
    """``--write-baseline FILE``: record the findings; report only what it could not record (files that
    could not be analysed), so those are never taken for clean."""
    target = Path(args.write_baseline)
    root = config.root or target.resolve().parent
    results = in_own_files(results)
    named = [(baselines.relative_path(files.get(r.path, Path(r.path)), root), r) for r in results]
    text, count = baselines.dumps(named)
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None
    unrecorded = sorted((d for r in results if r.error is not None for d in r.diagnostics),
                        key=lambda d: d.order)
    _write(render(args.format, unrecorded, catalog(config.docs_url)), args.output_file)
    for crash in crashes:
        print(f"gradguard: {crash}", file=sys.stderr)
    if not args.quiet:
        recorded = len({name for name, r in named if r.error is None and r.diagnostics})
        print(f"Wrote {count} finding{'s' * (count != 1)} in {recorded} file{'s' * (recorded != 1)} to {target}"
              f" (checked {checked} file{'s' * (checked != 1)}).", file=sys.stderr)
        if unrecorded:
            print(text_output.summary(unrecorded, checked), file=sys.stderr)
    if crashes:
        return 2
    return 1 if unrecorded and not args.exit_zero else 0


def _fixing(run: FixRun | None) -> text_output.Fixing | None:
    """The closing line's account of a ``autofix.writer.run_fixes`` run."""
    if run is None:
        return None
    return text_output.Fixing(run.write, run.fixed, run.files_changed, run.unsafe_left, run.write_failures)


def _nothing_found(paths: list[str], config: Config) -> str:
    """The error for folders without a source file: nothing was checked, so nothing may pass."""
    from .files import discover

    message = f"no Python files or notebooks found under {', '.join(paths)}; nothing was checked"
    excluded = len(discover(paths, replace(config, exclude=()))) if config.exclude else 0
    if excluded:
        message += f" (the `exclude` setting of [tool.gradguard] excludes all {excluded})"
    return message


def _rules(args: argparse.Namespace) -> int:
    infos = catalog()
    width = max((len(i.name) for i in infos), default=0)
    for info in infos:
        print(f"{info.code}  {info.name:<{width}}  {info.summary}")
    return 0


def _rule(args: argparse.Namespace) -> int:
    code = args.code.strip().upper()
    for info in catalog():
        if info.code == code:
            sys.stdout.write(info.docs if info.docs.endswith("\n") else info.docs + "\n")
            return 0
    raise UsageError(f"unknown rule code {args.code!r} (see `gradguard rules`)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (2), --help and --version (0)
        return exc.code if isinstance(exc.code, int) else 0
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    timeout = getattr(args, "timeout", None)
    if isinstance(timeout, float) and not timeout <= MAX_PROBE_TIMEOUT_S:
        print(f"gradguard: --timeout must be at most {MAX_PROBE_TIMEOUT_S:.0f} seconds (a day), not {timeout:g}",
              file=sys.stderr)
        return 2
    try:
        return args.handler(args)
    except (UsageError, ConfigError) as exc:
        print(f"gradguard: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: the worker processes are stopped on the way out (batch.in_pool)
        print("gradguard: interrupted; nothing more was checked or written", file=sys.stderr)
        return INTERRUPTED
