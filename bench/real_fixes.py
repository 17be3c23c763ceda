"""How many real bugs the static analysis finds get fixed by its fixes, as torch judges (issue 26, item 6).

    python bench/real_fixes.py [--results DIR/results.json] [--safe-only] [--only SUBSTR] [--out DIR]

Takes the cases of bench/realworld and ../shared/realworld-dev that ``bench/realworld.py score`` counts as found
(a diagnostic on a culprit line, or found-related), copies each into a temporary folder (nothing is written
next to the originals), applies the fixes the way a user does -- ``gradguard check --fix --unsafe-fixes`` on the
copy (``--safe-only``: ``--fix``), the one path the CLI and the editor share -- and runs the copy with
``probe_fixes.judge``:

- a case of ours must exit 0 and, when silent, give the gradients of the thread's fix (its driver prints
  "gradients differ from the fix" otherwise); a raising case has no gradient check of its own, so "runs clean";
- a realworld-dev case must exit 0 and, when silent, print ``grad check: True``.

A case whose file no fix changed is "no fix"; a changed copy that still fails is "partly" when findings with no
fix are left in it, "wrong" otherwise.  A fixed copy that does not finish within --timeout (or a ``check --fix``
that does not finish within twice that) is "timeout": under load a slow case says nothing about the fix, so it is
neither fixed nor wrong (rerun it alone with --only).  Prints one line per case and the totals; writes
DIR/real_fixes.json (default .realworld_out/).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import probe_fixes  # noqa: E402
import realworld  # noqa: E402

FOUND = ("found", "found-related")
OUTCOMES = ("fixed", "partly", "wrong", "no fix", "timeout", "error")
SETS = {"ours": "ours", "realworld_dev": "dev"}  # results.json section -> probe_fixes target label


def found_cases(results: dict) -> set[tuple[str, str]]:
    """(label, case name) of every case the static analysis found."""
    out = set()
    for section, label in SETS.items():
        for r in results.get(section, {}).get("static", {}).get("results", []):
            if r["status"] in FOUND:
                out.add((label, Path(r["case"]).stem))
    return out


def snapshot(root: Path) -> dict[str, str]:
    files = [root] if root.is_file() else sorted(root.rglob("*.py"))
    return {str(p): p.read_text(encoding="utf-8") for p in files}


def fix_and_judge(t: probe_fixes.Target, safe_only: bool, timeout: float) -> dict:
    row = {"set": t.label, "target": t.name}
    with tempfile.TemporaryDirectory(prefix="realfix_") as tmp:
        tmp_path = Path(tmp)
        copy = tmp_path / t.path.name
        (shutil.copytree if t.path.is_dir() else shutil.copyfile)(t.path, copy)
        before = snapshot(copy)
        argv = [realworld.python(), "-m", "gradguard", "check", "--fix", "--no-cache", "--no-progress",
                "--exit-zero", "--quiet", *([] if safe_only else ["--unsafe-fixes"]), str(copy)]
        env = dict(os.environ, GRADGUARD_NO_CACHE="1", PYTHONPATH=str(ROOT / "server"))
        try:
            p = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout * 2)
        except subprocess.TimeoutExpired:
            return {**row, "outcome": "timeout", "seen": f"gradguard check --fix did not finish in {timeout * 2:g}s"}
        if p.returncode != 0:
            return {**row, "outcome": "error", "seen": (p.stdout + p.stderr).strip()[-200:]}
        after = snapshot(copy)
        changed = [os.path.relpath(k, tmp_path) for k in before if before[k] != after.get(k)]
        if not changed:
            return {**row, "outcome": "no fix", "seen": "no file changed"}
        ok, seen = probe_fixes.judge(t, copy, tmp_path, timeout)
        if seen == "timeout":
            return {**row, "outcome": "timeout", "seen": f"the fixed copy did not finish in {timeout:g}s",
                    "changed": changed}
        if ok:
            return {**row, "outcome": "fixed", "seen": seen, "changed": changed}
        # Still failing: wrong, unless a finding with no fix was left (the fixes did what they said, not all).
        try:
            left = subprocess.run([*argv[:4], "--no-cache", "--no-progress", "--exit-zero", "--quiet",
                                   "--format", "json", str(copy)], cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=timeout * 2)
        except subprocess.TimeoutExpired:
            return {**row, "outcome": "timeout", "seen": f"{seen}; counting the findings left did not finish",
                    "changed": changed}
        try:
            remaining = len(json.loads(left.stdout)["diagnostics"])
        except (ValueError, KeyError):
            remaining = 0
        outcome = "partly" if remaining else "wrong"
        return {**row, "outcome": outcome, "seen": f"{seen} ({remaining} findings left)", "changed": changed}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", help="a results.json of `bench/realworld.py score` (default: score now)")
    ap.add_argument("--safe-only", action="store_true", help="apply only the safe fixes (check --fix)")
    ap.add_argument("--only", help="only cases whose name contains this")
    ap.add_argument("--out", help="folder for real_fixes.json (default .realworld_out/)")
    ap.add_argument("--timeout", type=float, default=60, help="run seconds per case (default 60)")
    args = ap.parse_args(argv)
    out_dir = Path(args.out) if args.out else realworld.OUT
    if args.results:
        results = json.loads(Path(args.results).read_text())
    else:
        subprocess.run([realworld.python(), str(ROOT / "bench" / "realworld.py"), "score", "--out", str(out_dir)],
                       check=True, capture_output=True)
        results = json.loads((out_dir / "results.json").read_text())
    wanted = found_cases(results)
    chosen = [t for t in probe_fixes.targets(["ours", "dev"], args.only) if (t.label, t.name) in wanted]

    rows = []
    with concurrent.futures.ThreadPoolExecutor(realworld.MAX_PROCS) as pool:
        for r in pool.map(lambda t: fix_and_judge(t, args.safe_only, args.timeout), chosen):
            rows.append(r)
            print(f"{r['outcome']:7s} {r['set']:5s} {r['target']}: {r['seen']}", flush=True)
    totals = {}
    for label in ["all", "ours", "dev"]:
        mine = [r for r in rows if label == "all" or r["set"] == label]
        count = {o: sum(r["outcome"] == o for r in mine) for o in OUTCOMES}
        totals[label] = {"found": len(mine), **count}
    print()
    for label, c in totals.items():
        share = f"{c['fixed'] / c['found']:.0%}" if c["found"] else "-"
        print(f"{label:5s} found {c['found']:3d}: fixed and proven {c['fixed']:3d} ({share}), wrong {c['wrong']}, "
              f"partly (findings left with no fix) {c['partly']}, no fix {c['no fix']}, timeout {c['timeout']} "
              f"(not counted as wrong: rerun with --only), error {c['error']}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "real_fixes.json").write_text(json.dumps({"safe_only": args.safe_only, "totals": totals,
                                                         "cases": rows}, indent=1))
    return 1 if totals["all"]["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
