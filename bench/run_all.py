"""Every benchmark figure of issue 8 in one table, each with its goal: what `make bench` runs.

    python bench/run_all.py [--quick] [--json FILE]

Builds (or reuses) the pinned corpus (bench/build_corpus.py), then runs the existing benchmarks on it
and collects their figures: bench_engine.py (precision: every finding with its location; single-process
CPU vs ``ast.parse`` of the same files in the same run), bench_cache.py (``gradguard check --jobs N
--no-cache`` wall time on all cores, the cached re-run), the peak RSS of ``gradguard check --jobs 1 --no-cache``,
TorchFix and Fixit on the same files (each in its own virtualenv, bench/corpus/.tools-venv, so their libcst never
meets the project's), bench_lsp.py (editor latency on real files of the corpus, and server memory after opening its 20 largest files),
bench_coldstart.py (spawning ``gradguard lsp`` to the first diagnostics of a small file, with ``import
pygls.lsp.server`` as the floor) and bench_probe.py.
``--quick`` (under two minutes): peers on every 40th corpus file, fewer editor iterations, one probe workload.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import build_corpus

TOOLS_VENV = build_corpus.CORPUS / ".tools-venv"
PEERS = {"torchfix": "torchfix", "fixit": "fixit"}  # PyPI name -> command


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_json(script: str, *args: str, timeout: float = 3600) -> tuple[dict | None, str]:
    """Run bench/<script> with ``--json``; its figures, or None and why."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        path = Path(out.name)
    try:
        done = subprocess.run([sys.executable, str(BENCH / script), *args, "--json", str(path)],
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False)
        if done.returncode != 0:
            return None, f"{script} failed ({done.returncode}): {done.stderr.strip()[-600:]}"
        return json.loads(path.read_text()), done.stdout
    except subprocess.TimeoutExpired:
        return None, f"{script} took over {timeout:.0f} s"
    finally:
        path.unlink(missing_ok=True)


def parse_cpu(files: list[Path], repeat: int = 3) -> float:
    """CPU seconds of read + ``ast.parse`` of ``files``, the best of ``repeat`` (it varies up to 2x here)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for path in files:
                try:
                    ast.parse(path.read_bytes())
                except (SyntaxError, ValueError):
                    pass
        best = min(best, time.process_time() - start)
    return best


def peer_tools() -> tuple[Path | None, str]:
    """The virtualenv with torchfix and fixit, made on first use; None and why when pip cannot."""
    bin_dir = TOOLS_VENV / "bin"
    if all((bin_dir / cmd).exists() for cmd in PEERS.values()):
        return bin_dir, ""
    try:
        if not (bin_dir / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(TOOLS_VENV)], check=True, capture_output=True)
        done = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", *PEERS],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return None, f"pip install {' '.join(PEERS)} failed: {done.stderr.strip()[-400:]}"
    except (OSError, subprocess.CalledProcessError) as e:
        return None, f"cannot make {TOOLS_VENV}: {e}"
    return bin_dir, ""


def run_peer(bin_dir: Path, name: str, files: list[Path]) -> tuple[float | None, float, str]:
    """CPU seconds (the tool and all its workers), wall seconds, and a note.

    The files are copied to a temporary folder outside the repository first: Fixit skips files under
    a .gitignore'd folder even when they are named (it reported "0 files clean" on bench/corpus/).
    """
    exe = str(bin_dir / PEERS[name])
    with tempfile.TemporaryDirectory(prefix="gradguard-peers-") as tmp:
        rel = []
        for path in files:
            target = Path(tmp) / path.relative_to(build_corpus.CORPUS)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
            rel.append(str(target.relative_to(tmp)))
        # torchfix: one process (-j 1); fixit has no such switch, its workers' CPU is counted too
        cmd = [exe, "-j", "1", *rel] if name == "torchfix" else [exe, "lint", *rel]
        cpu, wall = children_cpu(), time.perf_counter()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, timeout=3600, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, 0.0, f"did not run: {e}"
        wall, cpu = time.perf_counter() - wall, children_cpu() - cpu
    out = done.stdout + done.stderr
    if done.returncode not in (0, 1) and "Traceback" in out:
        return None, wall, f"failed ({done.returncode}): {out.strip()[-300:]}"
    lines = [l for l in out.splitlines() if l.strip()]
    summary = next((l.strip(" 🧼🛠️") for l in reversed(lines) if "checked" in l or "clean" in l), "")
    return cpu, wall, f"exit {done.returncode}, {len(lines)} output lines" + (f"; {summary}" if summary else "")


# Run by a small interpreter of its own: a child's peak RSS counts its pages before ``exec`` too, so a child forked
# straight from this process (hundreds of MB after the benchmarks above) would report this process's size.
_PEAK_RSS_PARENT = """
import json, os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(json.dumps([os.waitstatus_to_exitcode(status), usage.ru_maxrss, usage.ru_utime + usage.ru_stime]))
"""


def check_peak_rss(folders: list[Path]) -> tuple[float, float]:
    """Peak RSS (MB: the kernel's kB / 1000, as ``/usr/bin/time -v`` gives it) and CPU seconds of ``gradguard check
    --jobs 1 --no-cache`` over ``folders``, as the kernel counts them for that child and the workers it starts and
    waits for (``os.wait4`` in a small parent, ``_PEAK_RSS_PARENT``: the peak of the largest of them, the CPU of all;
    with one job the files go through one worker at a time, ``batch.in_recycled``).  RSS does not vary with the
    load."""
    command = [sys.executable, "-m", "gradguard", "check", "--jobs", "1", "--no-cache", "--exit-zero", "--no-progress",
               *map(str, folders)]
    done = subprocess.run([sys.executable, "-c", _PEAK_RSS_PARENT, *command], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    code, max_rss_kb, cpu = json.loads(done.stdout)
    if code != 0:
        raise RuntimeError(f"gradguard check exited with {code}")
    return max_rss_kb / 1000, cpu


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"
    return {"nproc": os.cpu_count(), "cpu": model, "python": sys.version.split()[0], "torch": torch_version,
            "load": os.getloadavg(), "date": datetime.datetime.now().astimezone().isoformat(timespec="minutes")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="under two minutes: samples and fewer iterations")
    parser.add_argument("--json", type=Path, help="also write every figure to FILE")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: rss,peers,lsp,coldstart,probe")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    started = time.perf_counter()
    info = machine()
    log(f"{info['nproc']} CPUs ({info['cpu']}), load {info['load'][0]:.2f}, quick={args.quick}")

    # ---- corpus
    folders = build_corpus.build(quiet=True, packages=build_corpus.ISSUE8_PACKAGES)  # the pinned corpus of issue 8
    corpus = {f.name: build_corpus.measure_cached(f) for f in folders}
    files = sorted(p for f in folders for p in f.rglob("*.py"))
    lines = sum(m["lines"] for m in corpus.values())
    idiom_lines = sum(m["idiom_lines"] for m in corpus.values())
    list_file = Path(tempfile.mkstemp(prefix="gradguard-corpus-", suffix=".txt")[1])
    list_file.write_text("\n".join(map(str, files)) + "\n")  # the corpus is gitignored: name every file
    rows: list[tuple[str, str, str, str]] = []  # (figure, measured, goal, verdict)

    def row(figure: str, measured: str, goal: str = "", ok: bool | None = None) -> None:
        rows.append((figure, measured, goal, "" if ok is None else ("met" if ok else "**not met**")))

    row("corpus", f"{len(files):,} files, {lines:,} lines; {1000 * idiom_lines / lines:.1f} in-place idiom lines / 1k",
        "~300k lines, 12–20 / 1k", 12 <= 1000 * idiom_lines / lines <= 20)

    # ---- precision + single-process throughput (bench_engine)
    log("bench_engine: precision and single-process throughput")
    engine, note = run_json("bench_engine.py", "--files-from", str(list_file), "--show", "0", "--followed-share",
                            *(["--no-jedi"] if args.quick else []))
    findings = []
    if engine is None:
        row("precision / throughput (bench_engine)", note)
    else:
        findings = engine["findings"]
        errors = sum(1 for f in findings if f["severity"] == "error")
        warns = sum(1 for f in findings if f["severity"] == "warning")
        infos = len(findings) - errors - warns
        per_rule = ", ".join(f"{k}: {v}" for k, v in sorted(engine["by_rule"].items())) or "none"
        row("precision: errors on the corpus", f"{errors}", "0", errors == 0)
        row("precision: warnings on the corpus", f"{warns} (info: {infos})", "≤ 10, each a real bug or fixed", warns <= 10)
        row("precision: findings per rule and severity", per_rule)
        pc = engine["parse_cpu"]
        row("read + ast.parse, 1 process (CPU s)", f"{pc:.2f}", "the 1× yardstick")
        for label, cpu in engine["runs"].items():
            goal = "≤ 3× (issue 27)" if "own dataflow" in label else ""
            row(f"{label}, 1 process, no cache (CPU s)", f"{cpu:.2f} = {cpu / pc:.1f}× ast.parse", goal,
                cpu / pc <= 3 if goal else None)
            inside = engine.get("inside_followed_calls")
            if goal and inside is not None:
                row("  of it inside followed calls; what is left if summaries cost nothing",
                    f"{inside:.2f} ({inside / cpu:.0%}); {cpu - inside:.2f} = {(cpu - inside) / pc:.1f}× ast.parse")

    # ---- all cores and the cache (bench_cache)
    log("bench_cache: all cores, --no-cache, cached re-run")
    sys.path.insert(0, str(BENCH))
    import bench_cache

    try:
        cache = bench_cache.measure(list_file, no_cache_run=not args.quick)
        pc = cache["parse_cpu"]
        if cache["nocache"] is not None:
            w, c = cache["nocache"]
            row(f"gradguard check --jobs {cache['jobs']} --no-cache (wall s / CPU s)",
                f"{w:.2f} wall / {c:.2f} CPU ({c / pc:.1f}× ast.parse {pc:.2f})")
        w, c = cache["cold"]
        row(f"gradguard check --jobs {cache['jobs']}, cold cache (wall s / CPU s)",
            f"{w:.2f} wall / {c:.2f} CPU ({c / pc:.1f}× ast.parse {pc:.2f})",
            "" if cache["nocache"] else "quick mode: stands in for --no-cache (it also writes the cache)")
        w, c = cache["warm"]
        row("gradguard check, unchanged re-run, cached (CPU s)",
            f"{c:.2f} ({w:.2f} wall) = {c / pc:.2f}× ast.parse", "≤ 1×", c / pc <= 1)
    except BaseException as e:  # noqa: BLE001 - report and go on
        row("all cores / cache (bench_cache)", f"failed: {e}")

    # ---- memory of a whole-corpus run in one process
    if "rss" not in skip:
        log("peak RSS: gradguard check --jobs 1 --no-cache")
        try:
            rss, cpu = check_peak_rss(folders)
            row("peak RSS of `gradguard check --jobs 1 --no-cache` over the corpus",
                f"{rss:.1f} MB ({cpu:.1f} CPU s)", "≤ 100 MB", rss <= 100)
        except (OSError, RuntimeError, subprocess.CalledProcessError, ValueError) as e:
            row("peak RSS of `gradguard check --jobs 1 --no-cache` (not measured)", str(e))

    # ---- peers
    if "peers" not in skip:
        sample = files[::40] if args.quick else files
        sample_lines = sum(p.read_bytes().count(b"\n") for p in sample)
        pc = parse_cpu(sample)
        what = f"{len(sample)} files, {sample_lines:,} lines" + (" (every 40th file)" if args.quick else "")
        log(f"peers on {what}; ast.parse {pc:.2f} CPU s")
        bin_dir, why = peer_tools()
        for name in PEERS:
            if bin_dir is None:
                row(f"{name} (CPU s)", f"not measured: {why}", "ratio to peers (issue: ≈229× / ≈194×)")
                continue
            log(f"{name} ...")
            cpu, wall, note = run_peer(bin_dir, name, sample)
            if cpu is None:
                row(f"{name} (CPU s)", f"not measured: {note}")
            else:
                row(f"{name} on {what} (CPU s)", f"{cpu:.2f} = {cpu / pc:.0f}× ast.parse {pc:.3f} ({wall:.1f} s wall; {note})",
                    "for comparison (issue: TorchFix ≈229×, Fixit ≈194×)")

    # ---- editor latency
    if "lsp" not in skip:
        log("bench_lsp: editor latency and memory")
        lsp_args = ["--warm", "3", "--cold", "1"] if args.quick else []
        largest = [str(f) for f in folders]
        lsp, note = run_json("bench_lsp.py", *lsp_args, "--torch-files", "20", "--real", str(build_corpus.CORPUS),
                             *[a for f in largest for a in ("--largest-from", f)])
        if lsp is None:
            row("editor latency (bench_lsp)", note)
        else:
            for s in lsp["sizes"]:
                def ms(key: str, s: dict = s) -> str:
                    p50, p95, _ = s[key]
                    return f"{p50 * 1000:.0f} / {p95 * 1000:.0f} ms"
                row(f"editor, {s['lines']:,} lines: keystroke p50 / p95", ms("keys"),
                    f"(n={s['keys'][2]}; line edit {ms('warm')}; cold edit {ms('cold')}; open {ms('first')}; "
                    f"ast.parse {s['ast_parse'] * 1000:.1f} ms)")
            big = lsp["largest"]
            if big:
                row(f"server RSS after opening the corpus's {big['files']} largest files ({big['lines']:,} lines)",
                    f"{big['rss_after_kib'] / 1024:.0f} MiB (peak {big['rss_peak_kib'] / 1024:.0f}; "
                    f"{big['rss_before_kib'] / 1024:.0f} after start)",
                    f"open → diagnostics median {big['first_median'] * 1000:.0f} ms, max {big['first_max'] * 1000:.0f} ms")

    # ---- cold start
    if "coldstart" not in skip:
        log("bench_coldstart: spawn to first diagnostics")
        cold, note = run_json("bench_coldstart.py", "--runs", "5", timeout=600)
        if cold is None:
            row("language server: spawn to first diagnostics (bench_coldstart)", note)
        else:
            s, floor = cold["spawn_to_diagnostics"], cold["floor"]
            pygls, bare = floor["python -c 'import pygls.lsp.server'"], floor["python -c pass"]
            cpu = cold["server_cpu"]
            row("language server: spawn `gradguard lsp` to first diagnostics of a small file, median of 5",
                f"{s['median'] * 1000:.0f} ms ({s['min'] * 1000:.0f}-{s['max'] * 1000:.0f}); floor: import pygls "
                f"{pygls['median'] * 1000:.0f} ms, python -c pass {bare['median'] * 1000:.0f} ms"
                + (f"; server CPU {cpu['median'] * 1000:.0f} ms" if cpu else ""),
                "≤ 450 ms", s["median"] <= 0.450)

    # ---- probe
    if "probe" not in skip:
        log("bench_probe: probe overhead")
        probe, note = run_json("bench_probe.py", *(["--quick", "--workloads", "1"] if args.quick else []))
        if probe is None:
            row("probe (bench_probe)", note)
        else:
            for name, w in probe["overhead"]["workloads"].items():
                row(f"probe overhead: {name}", f"{w['probe_ratio']:.2f}× untraced (anomaly mode {w['anomaly_ratio']:.2f}×)",
                    "≤ 1.3×", w["probe_ratio"] <= 1.3)
            lat = probe["latency"]
            row("probe: warm-worker latency beyond the script", f"{lat['latency_ms']:.0f} ms", "≤ 100 ms",
                lat["latency_ms"] <= 100)
            row("probe: cold `gradguard probe` (s)", f"{probe['cold']['cold_s']:.2f}")
    list_file.unlink(missing_ok=True)

    # ---- report
    took = time.perf_counter() - started
    print(f"\ngradguard benchmarks ({'quick' if args.quick else 'full'}), {info['date']}: {info['nproc']} CPUs "
          f"({info['cpu']}), Python {info['python']}, torch {info['torch']}, load average at start "
          f"{info['load'][0]:.2f}, at end {os.getloadavg()[0]:.2f}; took {took:.0f} s\n")
    print("| figure | measured | goal | |\n| --- | --- | --- | --- |")
    for figure, measured, goal, verdict in rows:
        print(f"| {figure} | {measured} | {goal} | {verdict} |")
    print(f"\nEvery finding on the corpus ({len(findings)}):")
    root = str(build_corpus.CORPUS) + "/"
    for f in findings:
        print(f"  {f['severity']:<7} {f['code']} {f['path'].replace(root, '')}:{f['line']}:{f['column']}: {f['message'][:150]}")
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "rows": rows, "findings": findings, "corpus": corpus,
                                         "seconds": took}, indent=1))


if __name__ == "__main__":
    main()
