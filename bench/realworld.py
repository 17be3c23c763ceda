"""The real-bug corpus (bench/realworld/cases): check that every case still does what its sidecar says,
and measure how many of them gradguard finds.

    python bench/realworld.py verify [--only SUBSTR] [--timeout S]
        Runs every case under the venv's python (a script as `python CASE.py` from the repo root, a folder
        case as `python -m NNN_slug.main` from bench/realworld/cases), at most 2 at a time, and checks the
        recorded outcome: the exact `error_first_line` of the last traceback block, or, for a silent case,
        exit 0 and the line `gradguard-case: gradients differ from the fix`.  Every sidecar is validated
        too (fields, kind/domain from the allowed lists, culprit lines that exist, unique thread URLs).
        Prints one line per case and a summary; exit 1 on any mismatch or invalid sidecar.

    python bench/realworld.py score [--probe] [--out DIR] [--only SUBSTR] [--per-file]
        Runs gradguard on each case (static: one `gradguard check --format json --no-cache` over all the
        files, folder cases as folders; with --probe also `gradguard check --probe --format json` per case,
        2 at a time) and scores each case:
          found          a diagnostic's own path:line is a culprit line;
          found-related  not found, but a related location of some diagnostic is a culprit line;
          wrong-line     neither, but gradguard reported something for the case;
          missed         nothing reported;
          error          gradguard failed (timeout, unparsable output).
        Scores our set and, when present, ../shared/realworld-dev (relative to the repo root; read only,
        its manifest.json gives file, culprit_lines, kind).  Prints recall per kind and per domain and the
        share of findings not on a culprit line; writes the per-case results and the misses into DIR
        (default .realworld_out/).

    python bench/realworld.py folder [--timeout S] [--jobs N] [--out DIR]
        The one-run figure (issue 31): ONE `gradguard check --probe --format json` over the case folder
        (bench/realworld/cases) and ../shared/realworld-dev/cases together, as a user would run it on a folder, and each
        case scored from that one report as `score` does (found = a diagnostic on a culprit line).  Prints the
        found share per set and over both, the cases not found, and the files the probe did not run to the end.
        A benchmark, not a test: it takes as long as every case's run (minutes).

    python bench/realworld.py ratchet
        Scores static on both sets and writes the found counts into bench/realworld/ratchet.json (what
        tests/test_realworld.py holds the analyser to).  Only run it when recall went up.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "bench" / "realworld"
CASES = HERE / "cases"
RATCHET = HERE / "ratchet.json"
DEV = (ROOT / ".." / "shared" / "realworld-dev").resolve()
OUT = ROOT / ".realworld_out"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"

KINDS = ("saved-tensor-mutated", "leaf-inplace", "view-of-leaf", "multi-output-view", "inplace-activation",
         "optimizer-step", "graph-break", "element-loop", "data-write", "out-arg", "nograd-view", "hook-write",
         "custom-function")
DOMAINS = ("rl-actor-critic", "rl-ppo", "rl-dqn", "rl-sac", "rl-other", "gan", "rnn-tbptt", "attention",
           "custom-function", "hooks", "normalization", "lightning-style", "hf-style", "dataclass", "multi-file",
           "vision", "nlp", "other")
OUTCOMES = ("raises", "silent")
SILENT_MARKER = "gradguard-case: gradients differ from the fix"
REQUIRED = ("source_url", "title", "kind", "domain", "entry", "culprit", "outcome", "diagnosis", "verified")
OPTIONAL = ("error_first_line",)
STATUSES = ("found", "found-related", "wrong-line", "missed", "error")
MAX_PROCS = 2


def python() -> str:
    return str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable


# ---------------------------------------------------------------------------------------------------------
# Cases and their sidecars


@dataclass
class Case:
    name: str                      # "101_ppo_ratio_inplace" (the sidecar's stem)
    sidecar: Path
    meta: dict
    problems: list = field(default_factory=list)
    folder: bool = False           # a package case, run with -m
    target: Path | None = None     # the script, or the package folder (what gradguard analyses)
    module: str | None = None      # "NNN_slug.main" for a folder case
    culprits: set = field(default_factory=set)  # {(realpath, line)}

    @property
    def kind(self):
        return self.meta.get("kind", "?")

    @property
    def domain(self):
        return self.meta.get("domain", "?")


def thread_key(url: str) -> str:
    """One key per thread: forum posts, comment anchors and trailing slashes of one thread are the same."""
    u = url.strip().split("#")[0].split("?")[0].rstrip("/").lower()
    u = re.sub(r"^https?://(www\.)?", "", u)
    m = re.match(r"(discuss\.pytorch\.org/t/)(?:[^/]+/)?(\d+)", u)
    if m:
        return m.group(1) + m.group(2)
    m = re.match(r"((?:\w+\.)?stackoverflow\.com/(?:questions|q|a)/\d+)", u)
    if m:
        return m.group(1).replace("/q/", "/questions/")
    m = re.match(r"(github\.com/[^/]+/[^/]+/(?:issues|pull|discussions)/\d+)", u)
    if m:
        return m.group(1).replace("/pull/", "/issues/")
    return u


def dev_urls() -> set:
    manifest = DEV / "manifest.json"
    if not manifest.exists():
        return set()
    return {thread_key(c.get("source_url", "")) for c in json.loads(manifest.read_text())}


def _check_culprit(case: Case, spec) -> None:
    if not isinstance(spec, str) or not re.fullmatch(r"[^:]+\.py:\d+", spec):
        case.problems.append(f"culprit {spec!r} is not 'relpath.py:LINE'")
        return
    rel, line = spec.rsplit(":", 1)
    line = int(line)
    path = (CASES / rel).resolve()
    if not path.is_file():
        case.problems.append(f"culprit {spec}: no such file")
        return
    if case.target is not None:
        inside = path == case.target.resolve() if not case.folder else case.target.resolve() in path.parents
        if not inside:
            case.problems.append(f"culprit {spec} is not in the case's own file or folder")
    lines = path.read_text(encoding="utf-8").splitlines()
    if not 1 <= line <= len(lines):
        case.problems.append(f"culprit {spec}: the file has {len(lines)} lines")
        return
    text = lines[line - 1].strip()
    if not text or text.startswith("#"):
        case.problems.append(f"culprit {spec} is a blank or comment line")
        return
    case.culprits.add((str(path), line))


def load_case(sidecar: Path) -> Case:
    name = sidecar.stem
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return Case(name, sidecar, {}, [f"unreadable sidecar: {exc}"])
    case = Case(name, sidecar, meta if isinstance(meta, dict) else {})
    if not isinstance(meta, dict):
        case.problems.append("sidecar is not a JSON object")
        return case
    p = case.problems
    if not re.fullmatch(r"\d{3}_[a-z0-9_]+", name):
        p.append("name is not NNN_short_slug")
    for key in REQUIRED:
        if key not in meta:
            p.append(f"missing field {key!r}")
        elif key != "culprit" and (not isinstance(meta[key], str) or not meta[key].strip()):
            p.append(f"field {key!r} is empty or not a string")
    for key in meta:
        if key not in REQUIRED + OPTIONAL:
            p.append(f"unknown field {key!r}")
    if meta.get("kind") not in KINDS:
        p.append(f"kind {meta.get('kind')!r} is not one of the allowed kinds")
    if meta.get("domain") not in DOMAINS:
        p.append(f"domain {meta.get('domain')!r} is not one of the allowed domains")
    url = meta.get("source_url")
    if isinstance(url, str) and not re.match(r"https://\S+$", url):
        p.append(f"source_url {url!r} is not an https URL")
    verified = meta.get("verified")
    if isinstance(verified, str) and not verified.startswith("torch 2.13"):
        p.append(f"verified {verified!r} does not name torch 2.13")
    outcome = meta.get("outcome")
    if outcome not in OUTCOMES:
        p.append(f"outcome {outcome!r} is not raises or silent")
    elif outcome == "raises":
        efl = meta.get("error_first_line")
        if not isinstance(efl, str) or not re.match(r"[A-Za-z_][\w.]*(Error|Exception|Warning)?: ", efl) \
                or "\n" in efl:
            p.append("a raising case needs error_first_line 'ExceptionType: message' on one line")
    elif "error_first_line" in meta:
        p.append("a silent case has no error_first_line")

    entry = meta.get("entry")
    script, folder = CASES / f"{name}.py", CASES / name
    if isinstance(entry, str):
        entry_path = CASES / entry.rstrip("/")
        if entry == f"{name}.py":
            case.target = script
            if not script.is_file():
                p.append(f"entry {entry} does not exist")
        elif entry.rstrip("/") in (name, f"{name}/main.py"):
            case.folder, case.target, case.module = True, folder, f"{name}.main"
            if not (folder / "__init__.py").is_file() or not (folder / "main.py").is_file():
                p.append(f"folder case {name}/ needs __init__.py and main.py")
        else:
            p.append(f"entry {entry!r} is neither {name}.py nor {name}/main.py")
        del entry_path
    if script.exists() and folder.exists():
        p.append(f"both {name}.py and {name}/ exist")
    culprit = meta.get("culprit")
    if not isinstance(culprit, list) or not culprit:
        p.append("culprit must be a non-empty list of 'relpath:line'")
    else:
        for spec in culprit:
            _check_culprit(case, spec)
    if case.target is not None and case.target.exists() and isinstance(url, str):
        head = case.target if not case.folder else case.target / "main.py"
        text = head.read_text(encoding="utf-8") if head.is_file() else ""
        if url not in text[:3000]:
            p.append(f"the top comment of {head.name} does not name the thread URL")
    return case


def load_cases(only: str | None = None) -> list[Case]:
    cases = [load_case(s) for s in sorted(CASES.glob("*.json"))]
    # Checks across cases: one thread per case, one number per case, none from realworld-dev, no orphans.
    seen_url, seen_num = {}, {}
    taken = dev_urls()
    for c in cases:
        url = c.meta.get("source_url")
        if isinstance(url, str):
            key = thread_key(url)
            if key in seen_url:
                c.problems.append(f"thread {url} is also used by {seen_url[key]}")
            seen_url.setdefault(key, c.name)
            if key in taken:
                c.problems.append(f"thread {url} is already used in realworld-dev")
        num = c.name[:3]
        if num in seen_num:
            c.problems.append(f"case number {num} is also used by {seen_num[num]}")
        seen_num.setdefault(num, c.name)
    if only:
        cases = [c for c in cases if only in c.name]
    return cases


def orphans() -> list[str]:
    """Scripts or folders in cases/ without a sidecar."""
    stems = {s.stem for s in CASES.glob("*.json")}
    out = []
    for p in sorted(CASES.iterdir()) if CASES.exists() else ():
        if p.name.startswith((".", "__")):
            continue
        stem = p.stem if p.is_file() else p.name
        if (p.suffix == ".py" or p.is_dir()) and stem not in stems:
            out.append(p.name)
    return out


# ---------------------------------------------------------------------------------------------------------
# verify


def last_exception_line(stderr: str) -> str | None:
    lines = stderr.splitlines()
    starts = [i for i, l in enumerate(lines) if l.startswith("Traceback (most recent call last):")]
    if not starts:
        return None
    for line in lines[starts[-1] + 1:]:
        if line and not line[0].isspace():
            return line
    return None


def run_case(case: Case, timeout: float) -> dict:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0")
    if case.folder:
        argv, cwd = [python(), "-m", case.module], CASES
    else:
        argv, cwd = [python(), str(case.target.relative_to(ROOT))], ROOT
    t0 = time.time()
    try:
        p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "got": f"timeout after {timeout:.0f}s", "seconds": time.time() - t0}
    secs = time.time() - t0
    marker = any(l.strip() == SILENT_MARKER for l in p.stdout.splitlines())
    exc = last_exception_line(p.stderr) if p.returncode else None
    if case.meta.get("outcome") == "silent":
        ok = p.returncode == 0 and marker
        got = "silent marker" if ok else (exc or f"exit {p.returncode}, no marker line")
    else:
        want = case.meta.get("error_first_line")
        ok = p.returncode != 0 and exc == want
        got = exc or (f"exit {p.returncode}" + (", silent marker" if marker else ", no exception"))
    return {"ok": ok, "got": got, "seconds": secs}


def cmd_verify(args) -> int:
    cases = load_cases(args.only)
    bad_sidecars = [c for c in cases if c.problems]
    for name in orphans():
        print(f"INVALID  {name}: no sidecar")
    runnable = [c for c in cases if c.target is not None and c.target.exists()]
    results = {}
    with concurrent.futures.ThreadPoolExecutor(MAX_PROCS) as pool:
        futures = {pool.submit(run_case, c, args.timeout): c for c in runnable}
        for fut in concurrent.futures.as_completed(futures):
            c = futures[fut]
            results[c.name] = fut.result()
    n_ok = n_bad = 0
    slow = []
    for c in cases:
        r = results.get(c.name)
        for prob in c.problems:
            print(f"INVALID  {c.name}: {prob}")
        if r is None:
            n_bad += 1
            continue
        want = "silent marker" if c.meta.get("outcome") == "silent" else c.meta.get("error_first_line")
        if r["ok"] and not c.problems:
            n_ok += 1
            print(f"ok       {c.name}  ({c.meta.get('outcome')}, {r['seconds']:.1f}s)")
        else:
            n_bad += 1
            if r["ok"]:
                print(f"ok-run   {c.name}  ({c.meta.get('outcome')}, {r['seconds']:.1f}s) but its sidecar is invalid")
            else:
                print(f"MISMATCH {c.name}  ({r['seconds']:.1f}s)\n    want: {want}\n    got:  {r['got']}")
        if r["seconds"] > 3:
            slow.append(f"{c.name} {r['seconds']:.1f}s")
    n_orph = len(orphans()) if not args.only else 0
    print()
    kinds = collections.Counter(c.kind for c in cases)
    outcomes = collections.Counter(c.meta.get("outcome") for c in cases)
    print(f"{len(cases)} cases: {n_ok} ok, {n_bad} mismatched or invalid"
          + (f", {n_orph} without a sidecar" if n_orph else "")
          + f"  (raises {outcomes['raises']}, silent {outcomes['silent']})")
    print("kinds: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    if slow:
        print("slower than 3 s (the machine may be loaded): " + ", ".join(slow))
    return 1 if n_bad or n_orph or bad_sidecars else 0


# ---------------------------------------------------------------------------------------------------------
# score


@dataclass
class Target:
    """One thing to score: a case of ours or of realworld-dev."""
    name: str
    path: Path                     # file or folder given to gradguard
    culprits: set                  # {(realpath, line)}
    kind: str
    domain: str


def our_targets(only=None) -> list[Target]:
    return [Target(c.name, c.target, c.culprits, c.kind, c.domain)
            for c in load_cases(only) if c.target is not None and c.target.exists() and c.culprits]


def dev_targets(only=None) -> list[Target]:
    manifest = DEV / "manifest.json"
    if not manifest.exists():
        return []
    out = []
    for c in json.loads(manifest.read_text()):
        path = (DEV / c["file"]).resolve()
        if only and only not in c["file"]:
            continue
        out.append(Target(Path(c["file"]).stem, path, {(str(path), int(l)) for l in c["culprit_lines"]},
                          c.get("kind", "?"), "-"))
    return out


def _gradguard(paths: list[Path], probe: bool, timeout: float):
    argv = [python(), "-m", "gradguard", "check", "--format", "json", "--no-cache", "--no-progress",
            "--exit-zero", "--quiet"]
    if probe:
        argv += ["--probe", "--timeout", str(int(timeout))]
    else:
        argv += ["--jobs", "1"]
    argv += [str(p) for p in paths]
    env = dict(os.environ, GRADGUARD_NO_CACHE="1")
    cwd = str(paths[0].resolve().parent)
    t0 = time.time()
    try:
        p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=timeout * (2 if probe else 1) + 30 * len(paths))
    except subprocess.TimeoutExpired:
        return None, "timeout", time.time() - t0, None
    try:
        report = json.loads(p.stdout)
        diags = report["diagnostics"]
    except (ValueError, KeyError, TypeError):
        return None, f"rc={p.returncode}: {(p.stdout + p.stderr).strip()[-300:]}", time.time() - t0, p.returncode
    # Paths in the report are relative to the working folder: make them absolute.
    for d in diags:
        for loc in [d] + list(d.get("related") or []):
            if loc.get("path"):
                loc["path"] = os.path.realpath(os.path.join(cwd, loc["path"]))
    if p.returncode not in (0, 1) and not probe:
        return diags, f"rc={p.returncode}: {p.stderr.strip()[-300:]}", time.time() - t0, p.returncode
    return diags, None, time.time() - t0, p.returncode


def _owner(diag_path: str, targets: list[Target]) -> Target | None:
    p = os.path.realpath(diag_path)
    for t in targets:
        tp = str(t.path.resolve())
        if p == tp or p.startswith(tp + os.sep):
            return t
    return None


def score_one(t: Target, diags: list, err: str | None) -> dict:
    def loc(d):
        return (os.path.realpath(d.get("path", "")), d.get("line"))

    own = [d for d in diags if loc(d) in t.culprits]
    related = [d for d in diags if loc(d) not in t.culprits
               and any(loc(r) in t.culprits for r in d.get("related") or [])]
    if err and not diags:
        status = "error"
    elif own:
        status = "found"
    elif related:
        status = "found-related"
    elif diags:
        status = "wrong-line"
    else:
        status = "missed"
    extra = [d for d in diags if loc(d) not in t.culprits]

    def short(d):
        rel = os.path.relpath(d.get("path", ""), t.path.parent)
        more = ",".join(str(r.get("line")) for r in d.get("related") or [])
        return (f"{rel}:{d.get('line')} {d.get('code')}" + (f" (related {more})" if more else "")
                + f": {d.get('message', '')[:160]}")

    return {"case": t.name, "kind": t.kind, "domain": t.domain, "status": status, "error": err,
            "culprits": sorted(f"{os.path.relpath(p, t.path.parent)}:{l}" for p, l in t.culprits),
            "hits": [short(d) for d in own], "extra": [short(d) for d in extra], "n_findings": len(diags),
            "n_extra": len(extra), "diagnostics": diags}


def score_static(targets: list[Target], per_file: bool = False, timeout: float = 120) -> list[dict]:
    """One gradguard process for all targets (paths in its JSON say which case a finding is in); a target
    whose batch failed is rerun alone, so one bad file cannot cost the others their result."""
    if not targets:
        return []
    results = {}
    if not per_file:
        diags, err, _, _ = _gradguard([t.path for t in targets], False, timeout)
        if err is None:
            by = collections.defaultdict(list)
            for d in diags:
                owner = _owner(d.get("path", ""), targets)
                if owner is not None:
                    by[owner.name].append(d)
            for t in targets:
                results[t.name] = score_one(t, by[t.name], None)
    for t in targets:
        if t.name not in results:
            diags, err, _, _ = _gradguard([t.path], False, timeout)
            results[t.name] = score_one(t, diags or [], err)
    return [results[t.name] for t in targets]


def score_probe(targets: list[Target], timeout: float = 60) -> list[dict]:
    def one(t):
        diags, err, secs, rc = _gradguard([t.path], True, timeout)
        r = score_one(t, diags or [], err)
        r["seconds"], r["rc"] = round(secs, 1), rc
        return r

    with concurrent.futures.ThreadPoolExecutor(MAX_PROCS) as pool:
        return list(pool.map(one, targets))


def summarize(results: list[dict]) -> dict:
    n = len(results)
    st = collections.Counter(r["status"] for r in results)
    findings = sum(r["n_findings"] for r in results)
    extra = sum(r["n_extra"] for r in results)
    return {"cases": n, "found": st["found"], "found_or_related": st["found"] + st["found-related"],
            "status": {s: st[s] for s in STATUSES}, "findings": findings, "off_culprit": extra}


def table(title: str, static: list[dict], probe: list[dict] | None, key: str) -> list[str]:
    groups = collections.defaultdict(list)
    for i, r in enumerate(static):
        groups[r[key]].append(i)
    head = f"  {key:22s} {'cases':>5s} {'static':>8s} {'+related':>8s}" + (f" {'probe':>8s}" if probe else "")
    lines = [title, head]

    def row(label, idx):
        n = len(idx)
        f = sum(static[i]["status"] == "found" for i in idx)
        fr = sum(static[i]["status"] in ("found", "found-related") for i in idx)
        line = f"  {label:22s} {n:5d} {f:4d} {f / n:3.0%} {fr:8d}"
        if probe:
            pf = sum(probe[i]["status"] == "found" for i in idx)
            line += f" {pf:4d} {pf / n:3.0%}"
        return line

    for k in sorted(groups):
        lines.append(row(k, groups[k]))
    lines.append(row("all", list(range(len(static)))))
    return lines


def report(label: str, static: list[dict], probe: list[dict] | None) -> list[str]:
    if not static:
        return [f"== {label}: no cases"]
    out = [f"== {label}"]
    out += table("recall per kind (found = a diagnostic on a culprit line)", static, probe, "kind")
    if any(r["domain"] != "-" for r in static):
        out += table("recall per domain", static, probe, "domain")
    for mode, res in (("static", static), ("probe", probe)):
        if not res:
            continue
        s = summarize(res)
        share = f"{s['off_culprit'] / s['findings']:.0%}" if s["findings"] else "-"
        out.append(f"{mode}: found {s['found']}/{s['cases']}, found or related {s['found_or_related']}/{s['cases']}; "
                   + ", ".join(f"{k} {v}" for k, v in s["status"].items())
                   + f"; findings not on a culprit line: {s['off_culprit']}/{s['findings']} ({share})")
    return out


def cmd_score(args) -> int:
    sets = [("ours", our_targets(args.only)), ("realworld_dev", dev_targets(args.only))]
    out_dir = Path(args.out) if args.out else OUT
    out_dir.mkdir(parents=True, exist_ok=True)
    all_lines, dump, misses = [], {}, {}
    for label, targets in sets:
        if label == "realworld_dev" and not DEV.exists():
            all_lines.append(f"== realworld_dev: {DEV} is absent, skipped")
            continue
        t0 = time.time()
        static = score_static(targets, per_file=args.per_file)
        t_static = time.time() - t0
        probe = None
        if args.probe:
            t0 = time.time()
            probe = score_probe(targets, timeout=args.timeout)
            t_probe = time.time() - t0
        lines = report(label, static, probe)
        lines.append(f"time: static {t_static:.1f}s" + (f", probe {t_probe:.1f}s" if probe else ""))
        print("\n".join(lines) + "\n", flush=True)
        all_lines += lines
        dump[label] = {"static": {"summary": summarize(static), "results": static}}
        misses[label] = {"static": [{k: v for k, v in r.items() if k != "diagnostics"}
                                    for r in static if r["status"] != "found"]}
        if probe:
            dump[label]["probe"] = {"summary": summarize(probe), "results": probe}
            misses[label]["probe"] = [{k: v for k, v in r.items() if k != "diagnostics"}
                                      for r in probe if r["status"] != "found"]
    (out_dir / "results.json").write_text(json.dumps(dump, indent=1))
    (out_dir / "misses.json").write_text(json.dumps(misses, indent=1))
    (out_dir / "tables.txt").write_text("\n".join(all_lines) + "\n")
    print(f"per-case results: {out_dir / 'results.json'}; misses: {out_dir / 'misses.json'}")
    return 0


def cmd_folder(args) -> int:
    """One `check --probe` over both case folders; each case scored from that one report."""
    sets = [("ours", our_targets(args.only))]
    folders = [CASES]
    if DEV.exists():
        sets.append(("realworld_dev", dev_targets(args.only)))
        folders.append(DEV / "cases" if (DEV / "cases").is_dir() else DEV)  # its cases, not its own scripts
    argv = [python(), "-m", "gradguard", "check", "--probe", "--format", "json", "--no-cache", "--no-progress",
            "--exit-zero", "--quiet", "--timeout", str(int(args.timeout)), "--jobs", str(args.jobs)]
    argv += [str(f) for f in folders]
    env = dict(os.environ, GRADGUARD_NO_CACHE="1")
    t0 = time.time()
    p = subprocess.run(argv, cwd=str(ROOT), env=env, capture_output=True, text=True)
    seconds = time.time() - t0
    try:
        report_json = json.loads(p.stdout)
        diags = report_json["diagnostics"]
    except (ValueError, KeyError, TypeError):
        print(f"gradguard failed (rc={p.returncode}): {(p.stdout + p.stderr).strip()[-600:]}")
        return 1
    for d in diags:
        for loc in [d] + list(d.get("related") or []):
            if loc.get("path"):
                loc["path"] = os.path.realpath(os.path.join(ROOT, loc["path"]))
    out_dir = Path(args.out) if args.out else OUT
    out_dir.mkdir(parents=True, exist_ok=True)
    lines, dump, total, found_all = [], {}, 0, 0
    for label, targets in sets:
        by = collections.defaultdict(list)
        for d in diags:
            owner = _owner(d.get("path", ""), targets)
            if owner is not None:
                by[owner.name].append(d)
        results = [score_one(t, by[t.name], None) for t in targets]
        s = summarize(results)
        total, found_all = total + s["cases"], found_all + s["found"]
        lines.append(f"{label}: found {s['found']}/{s['cases']} ({s['found'] / max(1, s['cases']):.1%}), "
                     + ", ".join(f"{k} {v}" for k, v in s["status"].items()))
        lines += [f"  not found: {r['case']} ({r['status']})" for r in results if r["status"] != "found"]
        dump[label] = {"summary": s, "results": results}
    probe_part = report_json.get("probe") or {}
    files = probe_part.get("files") or []
    unfinished = [f for f in files if f.get("outcome") not in ("ran", "stopped-by-finding", "no-entry")]
    lines.append(f"one run over {len(folders)} folder(s): found {found_all}/{total} ({found_all / max(1, total):.1%}) "
                 f"in {seconds:.0f}s (--jobs {args.jobs}, --timeout {int(args.timeout)})")
    if unfinished:
        lines.append(f"files not run to the end: {len(unfinished)}")
        lines += [f"  {f.get('path')}: {f.get('detail') or f.get('outcome')}"[:200] for f in unfinished]
    lines.append("file outcomes: " + ", ".join(f"{k} {v}" for k, v in (probe_part.get("counts") or {}).items()))
    dump["files"] = files
    (out_dir / "folder.json").write_text(json.dumps(dump, indent=1))
    print("\n".join(lines))
    print(f"per-case results: {out_dir / 'folder.json'}")
    return 0


def static_counts() -> dict:
    """{"ours": {"found", "cases"}, "realworld_dev": {...}} (realworld_dev only when present)."""
    out = {}
    for label, targets in (("ours", our_targets()), ("realworld_dev", dev_targets())):
        if label == "realworld_dev" and not DEV.exists():
            continue
        s = summarize(score_static(targets))
        out[label] = {"found": s["found"], "cases": s["cases"]}
    return out


def cmd_ratchet(args) -> int:
    counts = static_counts()
    old = json.loads(RATCHET.read_text()) if RATCHET.exists() else {}
    for label, c in counts.items():
        if label in old and c["found"] < old[label]["found"]:
            print(f"{label}: found {c['found']} < recorded {old[label]['found']}; not lowering the ratchet")
            counts[label] = {"found": old[label]["found"], "cases": c["cases"]}
    for label in old:
        counts.setdefault(label, old[label])
    RATCHET.write_text(json.dumps(counts, indent=1, sort_keys=True) + "\n")
    print(json.dumps(counts, sort_keys=True))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify", help="run every case and check its recorded outcome")
    v.add_argument("--only", help="only cases whose name contains this")
    v.add_argument("--timeout", type=float, default=120, help="seconds per case (default 120; the machine may be loaded)")
    s = sub.add_parser("score", help="score gradguard on our cases and realworld-dev")
    s.add_argument("--probe", action="store_true", help="also score `gradguard check --probe`")
    s.add_argument("--out", help="folder for results.json and misses.json (default .realworld_out/)")
    s.add_argument("--only", help="only cases whose name contains this")
    s.add_argument("--per-file", action="store_true", help="one static gradguard process per case")
    s.add_argument("--timeout", type=float, default=60, help="probe seconds per case (default 60)")
    f = sub.add_parser("folder", help="one `check --probe` over the case folders, each case scored from it")
    f.add_argument("--out", help="folder for folder.json (default .realworld_out/)")
    f.add_argument("--only", help="only score cases whose name contains this (the run still covers the folders)")
    f.add_argument("--timeout", type=float, default=60, help="probe seconds per file (default 60)")
    f.add_argument("--jobs", type=int, default=MAX_PROCS, help=f"probe workers (default {MAX_PROCS})")
    sub.add_parser("ratchet", help="record the static found counts in bench/realworld/ratchet.json")
    args = ap.parse_args(argv)
    return {"verify": cmd_verify, "score": cmd_score, "folder": cmd_folder, "ratchet": cmd_ratchet}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
