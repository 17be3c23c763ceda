"""What the CLI's result cache saves: a cold `gradguard check`, the same run again (every file a hit), and
read + `ast.parse` of the same files, on the installed torch package's sources (or the folder given).

    python bench/bench_cache.py [FOLDER | --files-from FILE]

Each gradguard run is a fresh process (`python -m gradguard check FOLDER`), with its cache in a new
temporary folder; times are wall seconds and CPU seconds of the process and its workers.
"""

from __future__ import annotations

import ast
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_check(folder: Path | None, cache_dir: str, *extra: str) -> tuple[float, float, str]:
    """``folder`` None: the paths come from ``extra`` (e.g. ``--files-from FILE``)."""
    env = {**os.environ, "GRADGUARD_CACHE_DIR": cache_dir}
    env.pop("GRADGUARD_NO_CACHE", None)
    cpu, wall = _children_cpu(), time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "gradguard", "check", *([str(folder)] if folder else []), "--no-progress", "--exit-zero",
         "--statistics",
         *extra],
        env=env, capture_output=True, text=True,
    )
    wall, cpu = time.perf_counter() - wall, _children_cpu() - cpu
    if run.returncode != 0:
        raise SystemExit(f"gradguard failed ({run.returncode}): {run.stderr[-2000:]}")
    return wall, cpu, run.stdout + run.stderr.strip().splitlines()[-1]


def parse_all(folder: Path | None, files: list[Path] | None = None) -> tuple[float, float, int]:
    if files is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
        from gradguard.config import Config
        from gradguard.files import discover

        files = [t.path for t in discover([str(folder)], Config()) if t.path.suffix == ".py"]
    targets = files
    cpu, wall = time.process_time(), time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for target in targets:
            try:
                ast.parse(target.read_bytes())
            except (SyntaxError, ValueError):
                pass
    return time.perf_counter() - wall, time.process_time() - cpu, len(targets)


def measure(files_from: Path, no_cache_run: bool = True) -> dict:
    """The same runs on the files listed in ``files_from`` (a corpus under a gitignored folder)."""
    files = [Path(line) for line in files_from.read_text().splitlines() if line.strip()]
    _, parse_cpu, count = parse_all(None, files)
    with tempfile.TemporaryDirectory() as cache:
        extra = ("--files-from", str(files_from))
        cold = run_check(None, cache, *extra)
        warm = run_check(None, cache, *extra)
        nocache = run_check(None, cache, *extra, "--no-cache") if no_cache_run else None
    assert cold[2] == warm[2] == (nocache or cold)[2], "a cached run must report exactly what a cold one does"
    return {"files": count, "parse_cpu": parse_cpu, "cold": cold[:2], "warm": warm[:2],
            "nocache": nocache[:2] if nocache else None,
            "jobs": os.cpu_count()}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--files-from":
        r = measure(Path(sys.argv[2]))
        print(f"{r['files']} files: ast.parse {r['parse_cpu']:.2f} CPU s; (wall s, CPU s) cold {r['cold']}, "
              f"warm {r['warm']}, --no-cache {r['nocache']}")
        return
    if len(sys.argv) > 1:
        folder = Path(sys.argv[1])
    else:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.origin is None:
            raise SystemExit("torch is not installed: give a folder")
        folder = Path(spec.origin).parent
    wall, cpu, count = parse_all(folder)
    rows = [("read + ast.parse (one process)", wall, cpu)]
    with tempfile.TemporaryDirectory() as cache:
        cold = run_check(folder, cache)
        warm = run_check(folder, cache)
        warm2 = run_check(folder, cache)
        nocache = run_check(folder, cache, "--no-cache")
    rows += [
        ("gradguard check, cold (fills the cache)", *cold[:2]),
        ("gradguard check --no-cache", *nocache[:2]),
        ("gradguard check, warm (every file a hit)", *warm[:2]),
        ("gradguard check, warm again", *warm2[:2]),
    ]
    assert cold[2] == warm[2] == nocache[2], "a cached run must report exactly what a cold one does"
    print(f"{folder}: {count} Python files, {os.cpu_count()} cores\n")
    print("| measure | wall s | CPU s | CPU vs ast.parse |\n| --- | --- | --- | --- |")
    for name, w, c in rows:
        print(f"| {name} | {w:.2f} | {c:.2f} | {c / cpu:.2f}x |")
    print(f"\nreport (identical in every run):\n{cold[2]}")


if __name__ == "__main__":
    main()
