"""How many probe-only findings carry a fix, and how many of those fixes torch proves (issue 31 item 3).

    python bench/probe_fixes.py [--sets fixtures,ours,dev] [--only SUBSTR] [--out DIR] [--timeout S]

A probe-only finding is one ``gradguard check --probe`` adds because no static finding matched it
(``probe/merge.py``: its message ends "(observed by the runtime probe)").  The probe runs over
tests/fixtures/probe_only (``--entry run``), bench/realworld/cases and ../shared/realworld-dev (read only;
nothing is copied into the project: fixed copies go to a temporary folder).  Each fix a probe-only finding
carries is applied to a copy of its file (with the fixes of the file's other findings, static or probe-only, that do
not overlap it, as ``check --probe --fix`` applies them: a program with two bugs runs clean only with both fixed) and
the copy is run:

- a fixture: ``run()`` of the fixed copy must run clean and give the gradients of ``reference()``
  (``tests/gradients.grads_equal``);
- a case of ours (bench/realworld.py's driver): exit 0, and no "gradients differ from the fix" line;
- a realworld-dev case: exit 0, and a silent case prints ``grad check: True``.

A fixed copy that still fails is "partly" when findings with no fix are left in its file (as bench/real_fixes.py
counts), "wrong" otherwise.  Prints one line per probe-only finding and the totals (found, with a fix, proven,
partly, wrong); writes them to
DIR/probe_fixes.json (default .realworld_out/).
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
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "server"))

import realworld  # noqa: E402

from gradguard.diagnostics import TextEdit  # noqa: E402
from gradguard.text import apply_edits  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "probe_only"
PROBE_ONLY_SUFFIX = "(observed by the runtime probe)"  # merge.to_diagnostic: a finding no static one matched

# Runs a fixture's fixed copy: run() must not raise, and its gradients must be reference()'s.
_FIXTURE_PROOF = """
import importlib.util, sys, warnings
sys.path.insert(0, {tests!r})
from gradients import grads_equal
def load(p, n):
    spec = importlib.util.spec_from_file_location(n, p)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m
warnings.simplefilter("ignore")
expected = load({original!r}, "original").reference()
got = load({fixed!r}, "fixed").run()
print("PROOF:", "equal" if grads_equal(got, expected) else "differ")
"""


@dataclass
class Target:
    label: str  # "fixtures", "ours", "dev"
    name: str
    path: Path  # the file or folder gradguard checks
    silent: bool = False
    module: str | None = None  # a folder case of ours: run as python -m


def targets(sets: list[str], only: str | None) -> list[Target]:
    out = []
    if "fixtures" in sets:
        for p in sorted(FIXTURES.glob("*/pos_*.py")):
            out.append(Target("fixtures", f"{p.parent.name}/{p.stem}", p))
    if "ours" in sets:
        for c in realworld.load_cases():
            if c.target is not None and c.target.exists():
                out.append(Target("ours", c.name, c.target, c.meta.get("outcome") == "silent", c.module))
    if "dev" in sets and (realworld.DEV / "manifest.json").exists():
        for c in json.loads((realworld.DEV / "manifest.json").read_text()):
            path = (realworld.DEV / c["file"]).resolve()
            out.append(Target("dev", path.stem, path, str(c.get("error_first_line", "")).startswith("silent")))
    return [t for t in out if not only or only in t.name]


def probe(t: Target, timeout: float) -> tuple[list[dict], str | None]:
    """``check --probe --format json`` of one target: its diagnostics (paths made absolute), or an error."""
    argv = [realworld.python(), "-m", "gradguard", "check", "--probe", "--format", "json", "--no-cache",
            "--no-progress", "--exit-zero", "--quiet", "--timeout", str(int(timeout))]
    if t.label == "fixtures":
        argv += ["--entry", "run"]
    cwd = t.path.parent
    env = dict(os.environ, GRADGUARD_NO_CACHE="1", PYTHONPATH=str(ROOT / "server"))
    try:
        p = subprocess.run(argv + [str(t.path)], cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=timeout * 2 + 60)
    except subprocess.TimeoutExpired:
        return [], "timeout"
    try:
        diags = json.loads(p.stdout)["diagnostics"]
    except (ValueError, KeyError, TypeError):
        return [], f"rc={p.returncode}: {(p.stdout + p.stderr).strip()[-300:]}"
    for d in diags:
        d["path"] = os.path.realpath(os.path.join(cwd, d["path"]))
    return diags, None


def probe_only(diags: list[dict]) -> list[dict]:
    return [d for d in diags if d.get("confirmed") and d["message"].endswith(PROBE_ONLY_SUFFIX)]


def _fixed_copy(t: Target, d: dict, tmp: Path, others: list[dict]) -> Path:
    """A copy of the target (file, or the case's folder) with ``d``'s fix applied, and those of ``others`` (the
    file's other findings with a fix) that do not overlap it; the path of the fixed file."""
    source = Path(d["path"])
    if t.path.is_dir():
        copy_root = tmp / t.path.name
        shutil.copytree(t.path, copy_root)
        fixed = copy_root / source.relative_to(t.path.resolve())
    else:
        fixed = tmp / t.path.name
        shutil.copyfile(t.path, fixed)
    def edits(diag):
        return [TextEdit(e["line"], e["column"], e["end_line"], e["end_column"], e["new_text"])
                for e in diag["fix"]["edits"]]

    text = fixed.read_text(encoding="utf-8")
    chosen = edits(d)
    for other in others:
        try:
            apply_edits(text, chosen + edits(other))
        except ValueError:
            continue  # overlaps: the planner would apply it in a later pass, on the fixed text
        chosen += edits(other)
    fixed.write_text(apply_edits(text, chosen), encoding="utf-8")
    return fixed


def prove(t: Target, d: dict, others: list[dict], timeout: float) -> tuple[bool, str]:
    """Whether torch proves ``d``'s fix on ``t`` (with ``others``: the fixes of the other findings of its file, a
    program with several bugs being fixed only by all of their fixes), and what was seen."""
    with tempfile.TemporaryDirectory(prefix="probefix_") as tmp:
        tmp_path = Path(tmp)
        try:
            fixed = _fixed_copy(t, d, tmp_path, others)
        except ValueError as exc:
            return False, f"edits do not apply: {exc}"
        return judge(t, fixed, tmp_path, timeout)


def judge(t: Target, fixed: Path, tmp_path: Path, timeout: float) -> tuple[bool, str]:
    """Run the fixed copy ``fixed`` of ``t`` (inside ``tmp_path``): whether it runs clean with the reference
    gradients (a fixture's ``reference()``, the thread's fix for a silent case), and what was seen."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0")
    if t.label == "fixtures":
        code = _FIXTURE_PROOF.format(tests=str(ROOT / "tests"), original=str(t.path), fixed=str(fixed))
        argv, cwd = [realworld.python(), "-c", code], tmp_path
    elif t.module:
        argv, cwd = [realworld.python(), "-m", t.module], tmp_path
    else:
        argv, cwd = [realworld.python(), str(fixed)], tmp_path
    try:
        p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, "timeout"
    if p.returncode != 0:
        return False, realworld.last_exception_line(p.stderr) or f"exit {p.returncode}"
    out = p.stdout.splitlines()
    if t.label == "fixtures":
        ok = "PROOF: equal" in out
        return ok, "reference gradients" if ok else "gradients differ from reference()"
    if t.label == "ours":
        ok = not any(line.strip() == realworld.SILENT_MARKER for line in out)
        return ok, "runs clean" + (", gradients of the thread's fix" if t.silent else "") if ok else \
            "gradients differ from the thread's fix"
    checks = [line for line in out if line.startswith("grad check:")]
    ok = not t.silent or (checks and all(line.split(":", 1)[1].strip() == "True" for line in checks))
    return bool(ok), ("runs clean" + (", grad check True" if t.silent else "")) if ok else "grad check False"


def _show(r: dict) -> None:
    if "error" in r:
        print(f"ERROR   {r['set']:8s} {r['target']}: {r['error']}", flush=True)
        return
    state = "no fix " if not r["fix"] else "proven " if r["proven"] else "partly " if r.get("partly") else "WRONG  "
    more = f"  [{r['fix']}{'' if r['safe'] else ', unsafe'}: {r['seen']}]" if r["fix"] else ""
    print(f"{state} {r['set']:8s} {r['target']}  {r['path']}:{r['line']} {r['code']}{more}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="fixtures,ours,dev", help="comma-separated: fixtures, ours, dev")
    ap.add_argument("--only", help="only targets whose name contains this")
    ap.add_argument("--names", help="a file naming the targets to run, one a line (e.g. those with probe-only findings)")
    ap.add_argument("--out", help="folder for probe_fixes.json (default .realworld_out/)")
    ap.add_argument("--timeout", type=float, default=60, help="probe and run seconds per target (default 60)")
    args = ap.parse_args(argv)
    chosen = targets(args.sets.split(","), args.only)
    if args.names:
        names = set(Path(args.names).read_text(encoding="utf-8").split())
        chosen = [t for t in chosen if t.name in names]

    def one(t: Target) -> list[dict]:
        diags, err = probe(t, args.timeout)
        rows = []
        if err:
            rows.append({"set": t.label, "target": t.name, "error": err})
        added = probe_only(diags)
        for d in added:
            row = {"set": t.label, "target": t.name, "line": d["line"], "code": d["code"],
                   "path": os.path.relpath(d["path"], t.path.parent), "message": d["message"][:200],
                   "related": [f"{r['line']}: {r['message'][:70]}" for r in d.get("related") or []],
                   "fix": d["fix"]["title"] if d["fix"] else None, "safe": d["fix"]["safe"] if d["fix"] else None}
            if d["fix"]:
                # every other fix of the file, the static findings' too: ``check --probe --fix`` applies them all
                others = [o for o in diags if o is not d and o["fix"] and o["path"] == d["path"]]
                row["proven"], row["seen"] = prove(t, d, others, args.timeout)
                # as bench/real_fixes.py counts: a copy that still fails while findings with no fix are left in it
                row["partly"] = not row["proven"] and any(o is not d and not o["fix"] and o["path"] == d["path"]
                                                          and not o["code"].startswith("GG9") for o in diags)
            rows.append(row)
        return rows

    rows = []
    with concurrent.futures.ThreadPoolExecutor(realworld.MAX_PROCS) as pool:
        for part in pool.map(one, chosen):  # printed as they come, in order
            rows += part
            for r in part:
                _show(r)
    found = [r for r in rows if "error" not in r]
    totals = {}
    for label in ["all", *args.sets.split(",")]:
        mine = [r for r in found if label == "all" or r["set"] == label]
        fixed = [r for r in mine if r["fix"]]
        proven = [r for r in fixed if r["proven"]]
        partly = [r for r in fixed if r.get("partly")]
        totals[label] = {"probe_only": len(mine), "with_fix": len(fixed), "proven": len(proven),
                         "partly": len(partly), "wrong": len(fixed) - len(proven) - len(partly)}
    print()
    for label, c in totals.items():
        share = f"{c['proven'] / c['probe_only']:.0%}" if c["probe_only"] else "-"
        print(f"{label:8s} probe-only findings {c['probe_only']:3d}, with a fix {c['with_fix']:3d}, "
              f"proven {c['proven']:3d} ({share}), partly {c['partly']} (findings with no fix left), wrong {c['wrong']}")
    out_dir = Path(args.out) if args.out else realworld.OUT
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "probe_fixes.json").write_text(json.dumps({"totals": totals, "findings": rows}, indent=1))
    return 1 if any(c["wrong"] for c in totals.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
