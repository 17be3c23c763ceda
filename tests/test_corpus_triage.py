"""The library corpus for precision (issue 30): every warning/error finding on bench/corpus is triaged.

bench/corpus_triage.json holds one entry per finding, keyed so that it survives unrelated edits of the
analysis: the package folder, the path inside it, the code and the stripped text of the finding's line
(the line number is kept as information only).  A "real" entry names a torch reproduction in bench/repro/;
a "false" entry gives the general cause, with a fixture of the general form in tests/fixtures/corpus_false/.

The corpus test needs the pinned corpus (gitignored); build it first with

    .venv/bin/python bench/build_corpus.py

It is skipped, saying so, when the corpus is not there.  The well-formedness test always runs (fast).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRIAGE = ROOT / "bench" / "corpus_triage.json"
CORPUS = ROOT / "bench" / "corpus"
FALSE_FIXTURES = ROOT / "tests" / "fixtures" / "corpus_false"
SEVERITIES = ("warning", "error")

sys.path.insert(0, str(ROOT / "bench"))
import build_corpus  # noqa: E402


def key_of(package: str, path: str, code: str, line_text: str) -> tuple[str, str, str, str]:
    return (package, path, code, " ".join(line_text.split()))


def load_triage() -> dict:
    return json.loads(TRIAGE.read_text(encoding="utf-8"))


def corpus_folders() -> list[Path]:
    return [build_corpus.folder_for(name, version, CORPUS) for name, version, _ in build_corpus.PACKAGES]


def test_triage_entries_are_well_formed():
    data = load_triage()
    folders = {f.name for f in corpus_folders()}
    keys = Counter()
    for entry in data["entries"]:
        where = f"{entry.get('package')}/{entry.get('path')}:{entry.get('line')} {entry.get('code')}"
        assert set(entry) >= {"package", "path", "code", "line_text", "line", "verdict", "reason"}, where
        assert entry["package"] in folders, f"{where}: not a package of bench/build_corpus.py"
        assert entry["code"].startswith("GG") and len(entry["code"]) == 5, where
        assert entry["line_text"].strip() == entry["line_text"] and entry["line_text"], where
        assert isinstance(entry["line"], int) and entry["line"] > 0, where
        assert entry["verdict"] in ("real", "false"), where
        assert entry["reason"].strip(), f"{where}: no reason"
        if entry["verdict"] == "real":
            assert entry.get("repro"), f"{where}: a real finding needs a repro"
            assert (ROOT / entry["repro"]).is_file(), f"{where}: {entry['repro']} is missing"
        else:
            assert entry.get("fixture"), f"{where}: a false finding needs the fixture of its general form"
            assert (ROOT / entry["fixture"]).is_file(), f"{where}: {entry['fixture']} is missing"
        keys[key_of(entry["package"], entry["path"], entry["code"], entry["line_text"])] += 1
    duplicated = [k for k, n in keys.items() if n > 1]
    assert not duplicated, f"entries with the same key: {duplicated}"


def test_false_fixtures_have_a_one_line_docstring():
    for path in sorted(FALSE_FIXTURES.glob("*.py")):
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith('"""') and first.endswith('"""') and len(first) > 6, f"{path.name}: {first!r}"


def run_analysis() -> list[dict]:
    env = dict(os.environ, GRADGUARD_NO_CACHE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "gradguard", "check", "--format", "json", "--no-cache", "--no-progress", "--exit-zero",
         "--jobs", "2", str(CORPUS.relative_to(ROOT))],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)["diagnostics"]


def finding_key(diag: dict) -> tuple[tuple[str, str, str, str], int]:
    rel = Path(diag["path"]).resolve().relative_to(CORPUS.resolve())
    package, inner = rel.parts[0], Path(*rel.parts[1:]).as_posix()
    lines = (CORPUS / rel).read_text(encoding="utf-8", errors="replace").splitlines()
    text = lines[diag["line"] - 1] if 0 < diag["line"] <= len(lines) else ""
    return key_of(package, inner, diag["code"], text), diag["line"]


@pytest.mark.skipif(not all(f.is_dir() for f in corpus_folders()),
                    reason="bench/corpus is not built: run `.venv/bin/python bench/build_corpus.py` first")
def test_every_corpus_finding_is_triaged():
    entries = {key_of(e["package"], e["path"], e["code"], e["line_text"]): e for e in load_triage()["entries"]}
    findings = [d for d in run_analysis() if d["severity"] in SEVERITIES]
    seen = set()
    untriaged = []
    verdicts = Counter()
    for diag in findings:
        key, line = finding_key(diag)
        entry = entries.get(key)
        if entry is None:
            untriaged.append(f"{key[0]}/{key[1]}:{line} {key[2]} {diag['severity']}: {key[3]}\n    {diag['message']}")
            continue
        seen.add(key)
        verdicts[entry["verdict"]] += 1
    lines = sum(build_corpus.measure_cached(f)["lines"] for f in corpus_folders())
    real_bugs = sorted({e["repro"] for k, e in entries.items() if k in seen and e["verdict"] == "real"})
    print(f"\ncorpus: {len(corpus_folders())} packages, {lines:,} lines; {len(findings)} warning/error findings: "
          f"{verdicts['real']} real, {verdicts['false']} false, {len(untriaged)} untriaged; "
          f"false per 100k lines {100_000 * verdicts['false'] / lines:.2f}; real bugs (repros): {len(real_bugs)}")
    for repro in real_bugs:
        print("  real:", repro)
    gone = [f"{k[0]}/{k[1]} {k[2]} ({e['verdict']}): {k[3]}" for k, e in entries.items() if k not in seen]
    if gone:
        print(f"{len(gone)} triage entries no longer reported (fixed or moved):")
        for g in gone:
            print("  ", g)
    assert not untriaged, f"{len(untriaged)} untriaged findings on bench/corpus:\n" + "\n".join(untriaged)
