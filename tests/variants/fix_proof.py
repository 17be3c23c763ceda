"""Every fix proven on the variants: each torch-proven positive variant is fixed with
``gradguard check --fix --unsafe-fixes`` and the fixed file is proven with torch.

    PYTHONPATH=server:tests python -m variants --fixes [--sample N --seed S] [--rule CODE] [--workers N]

The fixtures are the shapes the fixes were written against; the variants move the culprit into helpers,
classes, closures, notebooks, other spellings, and a fix that is offered there must still be right.  A job runs
in a long-lived worker (torch imported once) and ends in one status:

- ``not flagged``: the analyser reports no finding of the fixture's rule on the variant;
- ``no fix``: flagged, but ``--fix --unsafe-fixes`` leaves the file as it was;
- ``proven``: the fixed variant's ``run()`` returns the gradients of the original fixture's ``reference()``
  (the variant harness keeps ``run`` and ``reference`` by name), the analyser finds nothing in it, and a
  second ``--fix --unsafe-fixes`` changes nothing;
- ``failed``: a fix was applied and one of those checks fails; ``why`` says which (this is a wrong fix).

Results are cached in ``.variants_cache/fix_proofs.json``, keyed by the variant, the fixture and torch's version,
for one state of the sources of ``server/gradguard`` (any change to the analyser or the fixes re-runs every job).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import multiprocessing
import os
import signal
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from fixture_corpus import all_fixtures
from gradients import grads_equal

from variants import harness, proof
from variants.transforms import BY_NAME

PROVEN, FAILED, NO_FIX, NOT_FLAGGED = "proven", "failed", "no fix", "not flagged"
FIX_PROOF_VERSION = "1"  # bump when the proof's meaning changes (invalidates the cache)
TIMEOUT = 60  # seconds per job: two analyses, up to three fix runs, two torch runs
SERVER = Path(__file__).resolve().parents[2] / "server" / "gradguard"

_counter = [0]
_workdir: list[Path] = []


def server_stamp(root: Path = SERVER) -> str:
    """A hash of every analyser and fix source (contents, so a checkout or an edit both count)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".json", ".toml", ".md") and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(root)).encode())
            h.update(b"\0")
            h.update(path.read_bytes())
    return h.hexdigest()


def cache_key(variant_text: str, original_source: str) -> str:
    h = hashlib.sha256()
    for part in (FIX_PROOF_VERSION, proof.torch_version(), original_source, variant_text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout(f"timed out after {TIMEOUT}s")


def _init() -> None:
    import torch

    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, _on_alarm)
    _workdir[:] = [Path(tempfile.mkdtemp(prefix="gg_fix_variants_"))]  # own folder: a forked worker inherits the parent's


def _load(path: Path):
    _counter[0] += 1
    spec = importlib.util.spec_from_file_location(f"fixed_variant_{os.getpid()}_{_counter[0]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _analyse(path: Path):
    from gradguard.api import analyze_bytes
    from gradguard.config import Config

    return analyze_bytes(path.read_bytes(), str(path), Config(jedi=False)).diagnostics


def _fix(path: Path) -> None:
    from gradguard.cli import main

    main(["check", "--no-jedi", "--no-cache", "--jobs", "1", "--quiet", "--exit-zero", "--no-progress", "--fix",
          "--unsafe-fixes", str(path)])


def _python_of(path: Path) -> Path:
    """The Python torch runs: the file itself, or a notebook's code cells joined (as the harness proves them)."""
    if path.suffix != ".ipynb":
        return path
    joined = path.with_suffix(".py")
    joined.write_text(harness.notebook_python(path.read_text(encoding="utf-8"))[0], encoding="utf-8")
    return joined


def prove_fix(job: dict) -> dict:
    """One variant's fix proof (in a worker): ``{"status", "why", "titles"}``."""
    if not _workdir:
        _init()
    _counter[0] += 1
    folder = _workdir[0] / f"j{_counter[0]}"
    folder.mkdir()
    path = folder / f"variant.{job['kind']}"
    path.write_text(job["text"], encoding="utf-8")
    signal.alarm(TIMEOUT)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            return _prove_fix(job, path)
    except _Timeout as exc:
        return {"status": FAILED, "why": str(exc), "titles": []}
    except BaseException as exc:  # noqa: BLE001 - the harness reports it, with the variant
        return {"status": FAILED, "why": f"{type(exc).__name__}: {str(exc)[:200]}", "titles": []}
    finally:
        signal.alarm(0)


def prove_variant(key: str) -> dict:
    """``prove_fix`` of one variant named ``RULE/fixture::transform`` (the transform must still apply)."""
    fixture_id, transform = key.split("::")
    fx = next(fx for fx in all_fixtures() if fx.id == fixture_id)
    text = BY_NAME[transform].apply(fx.path.read_text(encoding="utf-8"))
    assert text is not None, f"{transform} no longer applies to {fixture_id}"
    return prove_fix({"text": text, "kind": BY_NAME[transform].kind, "rule": fx.path.parent.name,
                      "original": str(fx.path)})


def assert_proven(key: str) -> None:
    """``key``'s fix (``RULE/fixture::transform``) is offered and proven by torch (skipped without torch)."""
    pytest.importorskip("torch")
    res = prove_variant(key)
    assert res["status"] == PROVEN, f"{res['status']}: {res['why']} [{'; '.join(res['titles'])}]"


def _prove_fix(job: dict, path: Path) -> dict:
    found = _analyse(path)
    if not any(d.code == job["rule"] for d in found):
        return {"status": NOT_FLAGGED, "why": "", "titles": []}
    titles = sorted({d.fix.title for d in found if d.fix is not None})
    _fix(path)
    fixed = path.read_text(encoding="utf-8")
    if fixed == job["text"]:
        why = f"fixes offered ({titles[0]}) but --fix changed nothing" if titles else ""
        return {"status": FAILED if titles else NO_FIX, "why": why, "titles": titles}
    return check_fixed(job, path, titles)


def check_fixed(job: dict, path: Path, titles: list[str]) -> dict:
    """The proof of a fixed file at ``path``: runs clean with reference()'s gradients, nothing left to find,
    and a second fix changes nothing."""
    fixed = path.read_text(encoding="utf-8")
    out = {"status": FAILED, "titles": titles, "fixed": fixed}
    try:
        got = _load(_python_of(path)).run()
    except Exception as exc:  # noqa: BLE001 - torch (or Python) rejects the fixed program
        first = str(exc).splitlines()[0] if str(exc) else ""
        return out | {"why": f"the fixed variant raises {type(exc).__name__}: {first[:200]}"}
    if not grads_equal(got, _load(Path(job["original"])).reference()):
        return out | {"why": "the fixed variant's gradients differ from reference()"}
    left = _analyse(path)
    if left:
        return out | {"why": f"the analyser still finds {[(d.cell, d.line, d.code) for d in left]}"}
    _fix(path)
    if path.read_text(encoding="utf-8") != fixed:
        return out | {"why": "a second --fix changed the file again"}
    return {"status": PROVEN, "why": "", "titles": titles}


def _indexed(item):
    i, job = item
    return i, prove_fix(job)


def run_jobs(jobs: list[dict], workers: int = 2, progress=None) -> list[dict]:
    """Prove ``jobs`` in ``workers`` long-lived processes (in this process when 1); results in the jobs' order."""
    if not jobs:
        return []
    results: list = [None] * len(jobs)
    if workers <= 1:
        for i, job in enumerate(jobs):
            results[i] = prove_fix(job)
            if progress:
                progress()
        return results
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers, initializer=_init, maxtasksperchild=500) as pool:
        for i, res in pool.imap_unordered(_indexed, list(enumerate(jobs)), chunksize=2):
            results[i] = res
            if progress:
                progress()
    return results


def prove_fixes(variants, cache_dir: Path | None, workers: int = 2, progress=None) -> list[tuple]:
    """(variant, result) for every torch-proven positive variant, from the cache or a run.  The cache holds
    the results of one state of ``server/gradguard`` only: an edit there drops it."""
    positives = [v for v in variants if v.fixture.positive and v.proven]
    cache_path = cache_dir / "fix_proofs.json" if cache_dir else None
    stamp = server_stamp()
    cache = {}
    if cache_path and cache_path.exists():
        try:
            stored = json.loads(cache_path.read_text())
            cache = stored["results"] if stored.get("stamp") == stamp else {}
        except (OSError, ValueError, KeyError, AttributeError):
            cache = {}
    keys = [cache_key(v.text, v.fixture.path.read_text(encoding="utf-8")) for v in positives]
    todo = [(i, v) for i, (v, k) in enumerate(zip(positives, keys)) if k not in cache]
    jobs = [{"text": v.text, "kind": v.kind, "rule": v.rule, "original": str(v.fixture.path)} for _, v in todo]
    for (i, _), res in zip(todo, run_jobs(jobs, workers, progress)):
        cache[keys[i]] = res
    if cache_path:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        (cache_path.parent / ".gitignore").write_text("*\n")
        tmp = cache_path.with_suffix(".tmp_fixes")
        tmp.write_text(json.dumps({"stamp": stamp, "results": cache}))
        tmp.replace(cache_path)
    return [(v, cache[k]) for v, k in zip(positives, keys)]


def table(results: list[tuple], markdown: bool = False) -> str:
    """Per rule: positive variants proven by torch, flagged, a fix applied, the fix proven, failed."""
    rows: dict[str, Counter] = defaultdict(Counter)
    for v, res in results:
        c = rows[v.rule]
        c["variants"] += 1
        if res["status"] != NOT_FLAGGED:
            c["flagged"] += 1
        if res["status"] in (PROVEN, FAILED):
            c["fixed"] += 1
        c[res["status"]] += 1
    head = ["rule", "variants", "flagged", "fix applied", "fix proven", "failed", "% proven"]
    total = Counter()
    body = []
    for rule in sorted(rows):
        c = rows[rule]
        total.update(c)
        body.append(_row(rule, c))
    body.append(_row("TOTAL", total))
    if markdown:
        return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                         + ["| " + " | ".join(r) + " |" for r in body])
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]

    def fmt(r):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    rule_line = "-" * len(fmt(head))
    return "\n".join([fmt(head), rule_line] + [fmt(r) for r in body[:-1]] + [rule_line, fmt(body[-1])])


def by_transform(results: list[tuple]) -> str:
    """One line: the % of positive variants with a proven fix per transform (where coverage is lost)."""
    proven, total = Counter(), Counter()
    for v, res in results:
        total[v.transform] += 1
        proven[v.transform] += res["status"] == PROVEN
    return "proven per transform: " + ", ".join(
        f"{name} {100 * proven[name] / total[name]:.0f}%" for name in sorted(total, key=lambda n: proven[n] / total[n]))


def _row(name: str, c: Counter) -> list[str]:
    pct = f"{100 * c[PROVEN] / c['variants']:.0f}%" if c["variants"] else "-"
    return [name, str(c["variants"]), str(c["flagged"]), str(c["fixed"]), str(c[PROVEN]), str(c[FAILED]), pct]


def failures(results: list[tuple]) -> list[dict]:
    return [{"variant": v.key, "rule": v.rule, "why": res["why"], "titles": res["titles"],
             "path": str(v.path) if v.path else None}
            for v, res in results if res["status"] == FAILED]


def main(args, transforms) -> int:
    """``--fixes``: the per-rule table of fixes proven on the positive variants; failures to ``fix_report.json``."""
    start = time.perf_counter()
    cache_dir = None if args.no_cache else harness.CACHE_DIR
    variants, _, _, _, _ = harness.run_harness(
        transforms=transforms, rule=args.rule, fixture=args.fixture, sample=args.sample, seed=args.seed,
        out_dir=args.out, cache_dir=cache_dir, workers=args.workers, positives_only=True, analyse_variants=False)
    done = [0]
    proven = [v for v in variants if v.proven]

    def tick():
        done[0] += 1
        if done[0] % 100 == 0:
            print(f"  fix proofs: {done[0]} run", file=sys.stderr, flush=True)

    results = prove_fixes(proven, cache_dir, args.workers, tick)
    print(table(results, markdown=args.markdown))
    print(by_transform(results))
    failed = failures(results)
    for f in failed:
        print(f"FAILED {f['variant']}: {f['why']}  [{'; '.join(f['titles'])[:120]}]")
    print(f"\n{len(variants)} positive variants built, {len(proven)} proven by torch; {len(failed)} offered fixes "
          f"failed their proof; {time.perf_counter() - start:.0f}s")
    path = args.out / "fix_report.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    for v, res in results:  # the fixed text of a failure sits next to its variant, to open and diff
        if res["status"] == FAILED and v.path is not None and "fixed" in res:
            v.path.with_name(v.path.stem + ".fixed" + v.path.suffix).write_text(res["fixed"], encoding="utf-8")
    path.write_text(json.dumps(failed, indent=1))
    statuses = {v.key: res["status"] for v, res in results}  # to diff two runs
    (args.out / "fix_statuses.json").write_text(json.dumps(statuses, indent=0, sort_keys=True))
    print(f"report: {path}")
    return 1 if failed else 0
