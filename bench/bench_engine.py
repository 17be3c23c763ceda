"""Throughput of `gradguard check`'s engine against `ast.parse` on real PyTorch code.

Prints a table: files, lines, CPU seconds for reading+``ast.parse`` and for the full
analysis (single process, no cache), the ratio between them, and findings per rule.
The default corpus is the installed torch package's own Python sources (real, correct
PyTorch code); pass folders to measure others.

    python bench/bench_engine.py [--limit N] [FOLDER ...]
"""

from __future__ import annotations

import argparse
import ast
import collections
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from gradguard import engine  # noqa: E402
from gradguard.api import analyze_source  # noqa: E402
from gradguard.config import Config  # noqa: E402
from gradguard.inference.calls import CALL_STATS  # noqa: E402
from gradguard.inference.project import forget_modules  # noqa: E402


def default_corpus() -> list[Path]:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("torch is not installed; pass a folder of Python files to measure")
    return [Path(next(iter(spec.submodule_search_locations)))]


def _time_followed_calls() -> list[float]:
    """Wrap ``inline`` (a followed call of the project's own code, interpreted again at each call site) to add up
    the CPU of the outermost ones: returns the running total, a one-item list."""
    from gradguard.inference import followed

    inline, total, depth = followed.FollowedCallsMixin.inline, [0.0], [0]

    def timed(self, *args, **kwargs):
        if depth[0]:
            return inline(self, *args, **kwargs)
        depth[0], start = 1, time.process_time()
        try:
            return inline(self, *args, **kwargs)
        finally:
            total[0] += time.process_time() - start
            depth[0] = 0

    followed.FollowedCallsMixin.inline = timed
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--limit", type=int, default=0, help="only the first N files (quick mode)")
    parser.add_argument("--show", type=int, default=20, help="list up to N findings")
    parser.add_argument("--no-jedi", action="store_true", help="skip the run with jedi (quick mode)")
    parser.add_argument("--files-from", type=Path, help="measure the files listed in FILE, one a line")
    parser.add_argument("--json", type=Path, help="also write the figures and every finding to FILE")
    parser.add_argument("--followed-share", action="store_true",
                        help="also time the analysis spent inside followed calls (outermost `inline`s): what function "
                             "summaries that cost nothing would take out, and the ratio that would be left")
    args = parser.parse_args()
    if args.files_from:
        files = [Path(line) for line in args.files_from.read_text().splitlines() if line.strip()]
    else:
        files = sorted(p for folder in (args.folders or default_corpus()) for p in folder.rglob("*.py"))
    if args.limit:
        files = files[: args.limit]
    sources = []
    for path in files:
        try:
            sources.append((path, path.read_bytes()))
        except OSError:
            pass
    lines = sum(data.count(b"\n") for _, data in sources)

    warnings.simplefilter("ignore")
    start = time.process_time()
    for _, data in sources:
        try:
            ast.parse(data)
        except (SyntaxError, ValueError):
            pass
    parse_cpu = time.process_time() - start

    analyze_source(b"import torch\nx = torch.zeros(1)\nx += 1\n")  # load the knowledge table once
    followed_cpu = _time_followed_calls() if args.followed_share else None
    runs = {}
    by_rule: collections.Counter[str] = collections.Counter()
    shown = []
    found = []
    configs = [("gradguard, own dataflow only", Config(jedi=False)), ("gradguard + jedi for imports", Config(jedi=True))]
    for label, config in configs[: 1 if args.no_jedi else 2]:
        start = time.process_time()
        for path, data in sources:
            result = analyze_source(data, str(path), config)
            engine.forget_texts()  # between files as `gradguard check` does (batch.analyze_chunk): its memos of
            forget_modules()  # texts and the project modules no recent file read are dropped, not kept for the run
            if config.jedi:
                continue
            for d in result.diagnostics:
                by_rule[f"{d.code} {d.severity.value}"] += 1
                found.append({"path": str(path), "line": d.line, "column": d.span.column, "code": d.code,
                              "severity": d.severity.value, "message": d.message})
                if len(shown) < args.show:
                    shown.append(f"  {path}:{d.line}:{d.span.column}: {d.code} {d.message[:140]}")
        runs[label] = time.process_time() - start
        if followed_cpu is not None and not config.jedi:
            inside = followed_cpu[0]  # (the run with jedi, if any, is not counted)

    print(f"corpus: {len(sources)} files, {lines} lines")
    print(f"{'measure':<44}{'CPU s':>10}{'ratio':>10}")
    print(f"{'read + ast.parse':<44}{parse_cpu:>10.2f}{1:>9.2f}x")
    for label, cpu in runs.items():
        print(f"{label + ' (1 process)':<44}{cpu:>10.2f}{cpu / max(parse_cpu, 1e-9):>9.2f}x")
    if followed_cpu is not None:
        own = runs[configs[0][0]]
        print(f"{'  of which inside followed calls':<44}{inside:>10.2f}{inside / max(own, 1e-9):>9.1%}")
        print(f"{'  left with free function summaries':<44}{own - inside:>10.2f}"
              f"{(own - inside) / max(parse_cpu, 1e-9):>9.2f}x")
    print("findings:", dict(sorted(by_rule.items())) or "none")
    print("calls (both runs):", dict(CALL_STATS))
    for line in shown:
        print(line)
    if args.json:
        import json

        args.json.write_text(json.dumps({"files": len(sources), "lines": lines, "parse_cpu": parse_cpu, "runs": runs,
                                         "inside_followed_calls": inside if followed_cpu is not None else None,
                                         "by_rule": dict(by_rule), "findings": found}, indent=1))


if __name__ == "__main__":
    main()
