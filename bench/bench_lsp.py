"""Latency and memory of `gradguard lsp` through a real client connection (pygls's LanguageClient, stdio).

    python bench/bench_lsp.py [--sizes 300,3000,5000] [--warm 30] [--cold 8] [--torch-files 20]

Measures, with the server's debounce set to 0 (GRADGUARD_LSP_DEBOUNCE_MS=0), so the figures are the
server's own work plus the JSON-RPC round trip, never a client or server delay:
- first diagnostics after open: didOpen sent -> publishDiagnostics received (a fresh document);
- didChange -> publishDiagnostics, p50/p95:
  cold: the first edit of a freshly opened document (repeated on new documents),
  warm: edits on a document that has been edited before, of two kinds, each on a one-line statement inside a
  function nearest the middle of the file:
    line edits insert or remove a comment line inside a function (every line below moves),
    keystrokes add or remove a short comment at the end of a line inside a function (no line moves);
- the engine alone, in this process: ``api.analyze_source`` of the same keystroke edits with the
  per-document cache, so that latency minus engine is the server's and the connection's share;
- ast.parse of the same text, in this process, and the ratio of each latency to it;
- server RSS (VmRSS, and the peak VmHWM) after each size, and after opening the N largest .py files of
  the installed torch package (skipped when torch is not installed).
The files of each size are whole fixture programs (tests/fixtures) concatenated, cut at a top-level
statement and padded with blank lines to exactly that many lines; with ``--real DIR`` (e.g. bench/corpus, the
pinned library code of ``bench/build_corpus.py``), real code instead: the smallest .py file under DIR with at
least that many lines (ties by path), cut and padded the same way.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib.util
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
KEYSTROKE = "  # e"


# ---- inputs -------------------------------------------------------------------------------
def generate(lines: int, real: Path | None = None) -> str:
    """Exactly ``lines`` lines of fixture code (whole programs, cut at a top-level statement), or of the real
    file ``real_file(real, lines)``."""
    out: list[str] = []
    if real is not None:
        out = real_file(real, lines).read_text(encoding="utf-8").splitlines() + [""]
    files = sorted(FIXTURES.glob("*/*.py"))
    random.Random(0).shuffle(files)  # positives and negatives of every rule, in a fixed order
    i = 0
    while len(out) <= lines:  # one line past the cut: it shows whether a top-level block starts there
        out.extend(files[i % len(files)].read_text(encoding="utf-8").splitlines())
        out.append("")
        i += 1
    cut = lines
    while cut > 0 and not ((out[cut][:1].isalpha() or out[cut][:1] in "@#")  # the next line starts a top-level block
                           and _parses(out[:cut])):  # (not a docstring's line at column 0)
        cut -= 1
    body = out[:cut] + [""] * (lines - cut)
    text = "\n".join(body) + "\n"
    ast.parse(text)
    assert text.count("\n") == lines
    return text


def real_file(folder: Path, lines: int) -> Path:
    """The smallest .py file under ``folder`` with at least ``lines`` lines (ties: the first path) that parses."""
    sized = []
    for path in sorted(folder.rglob("*.py")):
        if any(part.startswith(".") for part in path.relative_to(folder).parts):
            continue  # a tool's virtualenv (bench/corpus/.tools-venv)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if text.count("\n") >= lines + 1:
            sized.append((text.count("\n"), str(path), path))
    for _, _, path in sorted(sized):
        if _parses(path.read_text(encoding="utf-8").splitlines()):
            return path
    raise SystemExit(f"no .py file of at least {lines} lines under {folder}")


def _parses(lines: list[str]) -> bool:
    try:
        ast.parse("\n".join(lines))
    except SyntaxError:
        return False
    return True


def edit_lines(text: str, count: int) -> list[int]:
    """0-based lines of one-line statements inside functions, around the middle of the file (a real file's middle
    can be a long literal at the top level, e.g. a table of configurations: an indented line is not enough)."""
    lines = text.split("\n")
    middle = len(lines) // 2
    inside = {stmt.lineno - 1 for fn in ast.walk(ast.parse(text))
              if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
              for stmt in ast.walk(fn) if isinstance(stmt, ast.stmt) and stmt is not fn
              and stmt.lineno == stmt.end_lineno and lines[stmt.lineno - 1].startswith("    ")
              and lines[stmt.lineno - 1].strip()[:1].isalpha()}
    candidates = sorted(inside, key=lambda i: abs(i - middle))
    return candidates[:count] or [middle]


def utf16_len(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def engine_keystrokes(text: str, spots: list[int], count: int) -> list[float]:
    """``api.analyze_source`` with a per-document cache, in this process, for the keystroke edits."""
    from gradguard.api import analyze_source

    lines = text.split("\n")
    cache: dict = {}
    analyze_source(text, "bench.py", cache=cache)
    times = []
    for i in range(count + 4):
        line = spots[(i // 2) % len(spots)]
        edited = lines[:line] + [lines[line] + KEYSTROKE] + lines[line + 1 :] if i % 2 == 0 else lines
        source = "\n".join(edited)
        t0 = time.perf_counter()
        analyze_source(source, "bench.py", cache=cache)
        if i >= 4:
            times.append(time.perf_counter() - t0)
    return times


def time_ast_parse(text: str, repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        ast.parse(text)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def rss_kib(pid: int) -> tuple[int, int]:
    fields = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0])
    except OSError:
        return 0, 0
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far (clock ticks, so only a sum over many edits is exact)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


# ---- the client ---------------------------------------------------------------------------
class Bench:
    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.client = LanguageClient("gradguard-bench", "1")
        self.published: dict[tuple[str, int | None], float] = {}
        self.counts: dict[tuple[str, int | None], int] = {}
        self.waiters: dict[tuple[str, int | None], asyncio.Future] = {}

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_publish(params: types.PublishDiagnosticsParams) -> None:
            key = (params.uri, params.version)
            self.published[key] = time.perf_counter()
            self.counts[key] = len(params.diagnostics)
            waiter = self.waiters.pop(key, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(self.published[key])

    async def start(self) -> None:
        env = {**os.environ, "GRADGUARD_LSP_DEBOUNCE_MS": "0"}
        await self.client.start_io(sys.executable, "-m", "gradguard.lsp", env=env, cwd=str(self.workspace))
        caps = types.ClientCapabilities(
            general=types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf16]),
            text_document=types.TextDocumentClientCapabilities(
                synchronization=types.TextDocumentSyncClientCapabilities(did_save=True),
                publish_diagnostics=types.PublishDiagnosticsClientCapabilities(version_support=True),
            ),
        )
        await self.client.initialize_async(
            types.InitializeParams(capabilities=caps, root_uri=self.workspace.as_uri(), process_id=os.getpid())
        )
        self.client.initialized(types.InitializedParams())

    @property
    def pid(self) -> int:
        return self.client._server.pid  # type: ignore[union-attr]

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 10)
            self.client.exit(None)
        finally:
            await self.client.stop()

    def expect(self, uri: str, version: int) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self.waiters[(uri, version)] = future
        return future

    async def open(self, uri: str, text: str, timeout: float = 600) -> float:
        waiter = self.expect(uri, 1)
        t0 = time.perf_counter()
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
        )
        return await asyncio.wait_for(waiter, timeout) - t0

    async def change(self, uri: str, version: int, line: int, insert: bool, timeout: float = 120, at: int | None = None) -> float:
        """A line edit (``at`` None) or a keystroke-sized edit at column ``at`` (UTF-16) of ``line``."""
        waiter = self.expect(uri, version)
        if at is not None:
            start = types.Position(line=line, character=at)
            end = start if insert else types.Position(line=line, character=at + len(KEYSTROKE))
            rng, new = types.Range(start=start, end=end), KEYSTROKE if insert else ""
        elif insert:
            rng, new = types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line, character=0)), "# edit\n"
        else:
            rng, new = types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line + 1, character=0)), ""
        t0 = time.perf_counter()
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangePartial(range=rng, text=new)],
            )
        )
        return await asyncio.wait_for(waiter, timeout) - t0

    def close(self, uri: str) -> None:
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))


# ---- measurements -------------------------------------------------------------------------
async def measure_size(workspace: Path, lines: int, warm: int, cold: int, real: Path | None = None) -> dict:
    text = generate(lines, real)
    parse = time_ast_parse(text)
    bench = Bench(workspace)
    await bench.start()
    try:
        rss_idle = rss_kib(bench.pid)
        firsts, colds = [], []
        spots = edit_lines(text, max(cold, warm))
        for i in range(cold):
            uri = (workspace / f"cold_{lines}_{i}.py").as_uri()
            firsts.append(await bench.open(uri, text))
            colds.append(await bench.change(uri, 2, spots[i % len(spots)], insert=True))
            bench.close(uri)
        uri = (workspace / f"warm_{lines}.py").as_uri()
        await bench.open(uri, text)
        version = 1
        warm_lines, warm_keys = [], []
        cpu = {}
        for i in range(warm + 4):
            if i == 4:
                cpu_start = cpu_seconds(bench.pid)
            line = spots[(i // 2) % len(spots)]
            version += 1
            elapsed = await bench.change(uri, version, line, insert=i % 2 == 0)
            if i >= 4:  # four edits to warm up
                warm_lines.append(elapsed)
        cpu["warm"] = (cpu_seconds(bench.pid) - cpu_start) / max(warm, 1)
        for i in range(warm + 4):
            if i == 4:
                cpu_start = cpu_seconds(bench.pid)
            line = spots[(i // 2) % len(spots)]
            version += 1
            elapsed = await bench.change(uri, version, line, insert=i % 2 == 0, at=utf16_len(text.split("\n")[line]))
            if i >= 4:
                warm_keys.append(elapsed)
        cpu["keys"] = (cpu_seconds(bench.pid) - cpu_start) / max(warm, 1)
        findings = bench.counts.get((uri, version), 0)
        rss = rss_kib(bench.pid)
    finally:
        await bench.stop()
    engine = engine_keystrokes(text, spots, warm)
    return {
        "lines": lines,
        "findings": findings,
        "ast_parse": parse,
        "first": firsts,
        "cold": colds,
        "warm": warm_lines,
        "keys": warm_keys,
        "engine": engine,
        "rss_idle": rss_idle,
        "rss": rss,
        "cpu": cpu,
    }


def largest_torch_files(count: int, roots: list[Path] | None = None) -> list[Path]:
    """The ``count`` largest .py files under ``roots`` (default: the installed torch package)."""
    if not roots:
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.origin is None:
            return []
        roots = [Path(spec.origin).parent]
    files = [p for root in roots for p in root.rglob("*.py") if p.is_file()]
    files.sort(key=lambda p: p.stat().st_size, reverse=True)
    return files[:count]


async def measure_torch(workspace: Path, count: int, roots: list[Path] | None = None) -> dict | None:
    files = largest_torch_files(count, roots)
    if not files:
        return None
    bench = Bench(workspace)
    await bench.start()
    rows = []
    try:
        rss_before = rss_kib(bench.pid)
        for path in files:
            text = path.read_text(encoding="utf-8", errors="replace")
            first = await bench.open(path.as_uri(), text)
            rows.append((path, text.count("\n"), first, time_ast_parse(text, repeat=3), bench.counts.get((path.as_uri(), 1), 0)))
        rss_after = rss_kib(bench.pid)
    finally:
        await bench.stop()
    return {"rows": rows, "rss_before": rss_before, "rss_after": rss_after}


# ---- report -------------------------------------------------------------------------------
def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def report(sizes: list[dict], torch_result: dict | None, torch_asked: bool = True) -> None:
    print("\ndidChange -> publishDiagnostics through a stdio client, debounce 0 (ms; (n.nx) = ratio to ast.parse of the file)")
    print(
        "| lines | findings | ast.parse | first diagnostics after open, p50 | cold edit p50 / p95 "
        "| warm line edit p50 / p95 | warm keystroke p50 / p95 | engine alone, keystroke p50 / p95 "
        "| server CPU per line edit / keystroke | server RSS MiB |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")

    def pair(values: list[float], parse: float) -> str:
        p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
        return f"{ms(p50)} / {ms(p95)} ({p95 / parse:.1f}x)"

    for r in sizes:
        parse = r["ast_parse"]
        first50 = percentile(r["first"], 0.5)
        print(
            f"| {r['lines']:,} | {r['findings']} | {ms(parse)} | {ms(first50)} ({first50 / parse:.1f}x) "
            f"| {pair(r['cold'], parse)} | {pair(r['warm'], parse)} | {pair(r['keys'], parse)} "
            f"| {pair(r['engine'], parse)} | {ms(r['cpu']['warm'])} / {ms(r['cpu']['keys'])} "
            f"| {r['rss'][0] / 1024:.0f} |"
        )
    print(
        f"(samples per size: {len(sizes[0]['cold'])} cold, {len(sizes[0]['warm'])} warm of each kind; "
        f"server RSS right after start: {sizes[0]['rss_idle'][0] / 1024:.0f} MiB; {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f})"
    )
    if torch_result is None:
        if torch_asked:
            print("\ntorch is not installed: no RSS figure for its largest files")
        return
    rows = torch_result["rows"]
    total_lines = sum(r[1] for r in rows)
    firsts = [r[2] for r in rows]
    parses = [r[3] for r in rows]
    print(f"\nThe {len(rows)} largest .py files of the installed torch ({total_lines:,} lines), opened one after another in one server:")
    print("| file | lines | findings | first diagnostics ms | ast.parse ms | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for path, lines, first, parse, found in rows:
        rel = path.as_posix().split("/site-packages/")[-1]
        print(f"| {rel} | {lines:,} | {found} | {ms(first)} | {ms(parse)} | {first / parse:.1f}x |")
    print(
        f"first diagnostics: median {ms(statistics.median(firsts))} ms, max {ms(max(firsts))} ms; "
        f"sum {sum(firsts):.2f} s vs ast.parse {sum(parses):.2f} s ({sum(firsts) / sum(parses):.1f}x)"
    )
    before, after = torch_result["rss_before"], torch_result["rss_after"]
    print(f"server RSS: {before[0] / 1024:.0f} MiB after start, {after[0] / 1024:.0f} MiB with all {len(rows)} open (peak {after[1] / 1024:.0f} MiB)")


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="gradguard-bench-lsp-") as tmp:
        workspace = Path(tmp)
        sizes = []
        for lines in args.sizes:
            print(f"measuring {lines} lines ...", file=sys.stderr, flush=True)
            sizes.append(await measure_size(workspace, lines, args.warm, args.cold, args.real))
        torch_result = None
        if args.torch_files > 0:
            print(f"opening the {args.torch_files} largest torch files ...", file=sys.stderr, flush=True)
            torch_result = await measure_torch(workspace, args.torch_files, args.largest_from)
    report(sizes, torch_result, torch_asked=args.torch_files > 0)
    if args.json:
        import json

        summary = {
            "sizes": [{"lines": r["lines"], "ast_parse": r["ast_parse"],
                       **{k: [percentile(r[k], 0.5), percentile(r[k], 0.95), len(r[k])]
                          for k in ("first", "cold", "warm", "keys", "engine")},
                       "cpu_per_edit": r["cpu"], "rss_kib": r["rss"][0], "rss_idle_kib": r["rss_idle"][0]} for r in sizes],
            "largest": None if torch_result is None else {
                "files": len(torch_result["rows"]), "lines": sum(row[1] for row in torch_result["rows"]),
                "first_median": statistics.median(row[2] for row in torch_result["rows"]),
                "first_max": max(row[2] for row in torch_result["rows"]),
                "rss_before_kib": torch_result["rss_before"][0], "rss_after_kib": torch_result["rss_after"][0],
                "rss_peak_kib": torch_result["rss_after"][1]},
        }
        args.json.write_text(json.dumps(summary, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[300, 3000, 5000])
    parser.add_argument("--warm", type=int, default=30, help="measured warm edits per size")
    parser.add_argument("--cold", type=int, default=8, help="cold edits (fresh documents) per size")
    parser.add_argument("--torch-files", type=int, default=20, help="open the N largest files (0: skip)")
    parser.add_argument("--largest-from", type=Path, action="append",
                        help="take the largest files from this folder (repeatable; default: the installed torch)")
    parser.add_argument("--real", type=Path, metavar="DIR",
                        help="edit real code: the smallest .py file under DIR of each size (e.g. bench/corpus)")
    parser.add_argument("--json", type=Path, help="also write the figures to FILE")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
