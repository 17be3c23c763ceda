"""The variants harness: every fixture x transform, proven with torch, then analysed.

    PYTHONPATH=server:tests python -m variants [--sample N --seed S] [--transform NAME] [--rule CODE]
                                               [--fixture SUBSTR] [--json FILE] [--markdown]
                                               [--write-known-misses] [--fixes]

See tests/variants/README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import random
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from fixture_corpus import Fixture, all_fixtures
from gradguard.rules import ALL_RULES
from variants import proof
from variants.transforms import ALL, MARKER

ROOT = Path(__file__).resolve().parents[2]
OUT_DIR = ROOT / ".variants_out"
CACHE_DIR = ROOT / ".variants_cache"
KNOWN_MISSES = Path(__file__).with_name("known_misses.txt")
TRANSFORMS_SOURCE = Path(__file__).with_name("transforms.py").read_text(encoding="utf-8")  # keys the build cache
RULES = [rule.code for rule in ALL_RULES]  # the table has a column per rule


@dataclass
class Variant:
    fixture: Fixture
    transform: str
    kind: str  # "py" or "ipynb"
    text: str  # the variant file's text (a notebook's JSON for "ipynb")
    python: str  # the Python source torch runs (a notebook's code cells joined)
    path: Path | None = None
    proven: bool | None = None
    why: str = ""
    expected: set = field(default_factory=set)  # {(cell or None, line, code)}
    found: list = field(default_factory=list)  # [(cell, line, code, message)]

    @property
    def key(self) -> str:
        return f"{self.fixture.id}::{self.transform}"

    @property
    def rule(self) -> str:
        return self.fixture.path.parent.name


def markers(text: str, cell: int | None = None) -> set:
    """(cell, line, code) of every ``# expect:`` marker, read as tests/fixture_corpus.py reads them."""
    out = set()
    for lineno, line in enumerate(text.splitlines(), start=1):
        mk = MARKER.search(line)
        if mk:
            for code in mk.group(1).split():
                out.add((cell, lineno, code))
    return out


def notebook_python(text: str) -> tuple[str, set]:
    nb = json.loads(text)
    parts, expected = [], set()
    for i, c in enumerate(nb["cells"], start=1):
        if c["cell_type"] == "code":
            src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            parts.append(src)
            expected |= markers(src, i)
    return "\n".join(parts) + "\n", expected


def _apply(item: tuple[str, str]) -> tuple[str, str | None]:
    """Run one transform on one source (in a build worker): ("ok", text or None) or ("raised", why)."""
    from variants.transforms import BY_NAME

    name, source = item
    try:
        return "ok", BY_NAME[name].apply(source)
    except Exception as exc:  # noqa: BLE001 - a transform bug drops the variant, counted
        return "raised", f"transform raised {type(exc).__name__}: {exc}"


def _build_key(name: str, source: str) -> str:
    h = hashlib.sha256()
    for part in (TRANSFORMS_SOURCE, name, source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _apply_all(pairs, cache: dict | None, workers: int) -> list[tuple[str, str | None]]:
    """Transform results for (fixture, transform) pairs, from the build cache or a pool of ``workers``."""
    results: list = [None] * len(pairs)
    todo = []
    for i, (fx, t) in enumerate(pairs):
        source = fx.path.read_text(encoding="utf-8")
        key = _build_key(t.name, source)
        if cache is not None and key in cache:
            results[i] = tuple(cache[key])
        else:
            todo.append((i, key, (t.name, source)))
    if todo:
        if workers > 1 and len(todo) > 8:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                done = pool.map(_apply, [item for _, _, item in todo], chunksize=8)
        else:
            done = [_apply(item) for _, _, item in todo]
        for (i, key, _), res in zip(todo, done):
            results[i] = res
            if cache is not None:
                cache[key] = list(res)
    return results


def build(fixtures: list[Fixture], transforms, sample: int | None = None, seed: int = 0, workers: int = 2,
          cache: dict | None = None) -> tuple[list[Variant], Counter, Counter, dict]:
    """The applicable (fixture, transform) variants (all of them, or ``sample`` of them chosen with ``seed``);
    counts of not-applicable and broken ones per transform, and examples of broken ones."""
    variants, not_applicable, broken, examples = [], Counter(), Counter(), defaultdict(list)
    pairs = [(fx, t) for t in transforms for fx in fixtures]
    if sample is not None:
        random.Random(seed).shuffle(pairs)
    i = 0
    while i < len(pairs) and (sample is None or len(variants) < sample):
        step = len(pairs) if sample is None else max(32, 2 * (sample - len(variants)))
        batch = pairs[i:i + step]
        i += step
        for (fx, t), (status, text) in zip(batch, _apply_all(batch, cache, workers)):
            if status != "ok":
                broken[t.name] += 1
                examples[t.name].append({"fixture": fx.id, "why": text})
                continue
            if text is None:
                not_applicable[t.name] += 1
                continue
            if t.kind == "ipynb":
                python, expected = notebook_python(text)
            else:
                python, expected = text, markers(text)
            try:
                compile(python, fx.id, "exec")
            except SyntaxError as exc:
                broken[t.name] += 1
                examples[t.name].append({"fixture": fx.id, "why": f"does not parse: {exc}"})
                continue
            if fx.positive and len(expected) != len(fx.expected):
                broken[t.name] += 1
                examples[t.name].append({"fixture": fx.id, "why": "markers lost"})
                continue
            variants.append(Variant(fx, t.name, t.kind, text, python, expected=expected))
    if sample is not None:
        variants = variants[:sample]
    variants.sort(key=lambda v: (v.transform, v.fixture.id))
    return variants, not_applicable, broken, examples


def write_variants(variants: list[Variant], out_dir: Path) -> None:
    for v in variants:
        folder = out_dir / v.transform
        folder.mkdir(parents=True, exist_ok=True)
        stem = v.fixture.id.replace("/", "__")
        v.path = folder / f"{stem}.{v.kind}"
        v.path.write_text(v.text, encoding="utf-8")
        if v.kind == "ipynb":
            (folder / f"{stem}.py").write_text(v.python, encoding="utf-8")


def prove_all(variants: list[Variant], cache: proof.ProofCache, workers: int = 2, quiet: bool = False) -> int:
    """Fill ``proven``/``why``; returns how many were run (not cached)."""
    todo, keys = [], []
    for v in variants:
        key = proof.cache_key(v.python, v.fixture.path.read_text(encoding="utf-8"))
        hit = cache.get(key)
        if hit is not None:
            v.proven, v.why = hit
        else:
            todo.append(v)
            keys.append(key)
    jobs = []
    for v in todo:
        py_path = v.path if v.kind == "py" else v.path.with_suffix(".py")
        jobs.append({"variant": str(py_path), "original": str(v.fixture.path), "positive": v.fixture.positive,
                     "expected_raise": v.fixture.expected_raise, "silent": v.fixture.silent,
                     "raises": v.fixture.raises})
    done = [0]

    def tick():
        done[0] += 1
        if not quiet and (done[0] % 100 == 0 or done[0] == len(jobs)):
            print(f"  torch proofs: {done[0]}/{len(jobs)}", file=sys.stderr, flush=True)

    for v, key, res in zip(todo, keys, proof.run_proofs(jobs, workers, tick)):
        v.proven, v.why = res
        cache.put(key, res)
    cache.save()
    return len(jobs)


def analyse(v: Variant) -> None:
    from gradguard.api import analyze_bytes, analyze_source
    from gradguard.config import Config

    if v.kind == "ipynb":
        res = analyze_bytes(v.text.encode("utf-8"), str(v.path or "variant.ipynb"), Config())
    else:
        res = analyze_source(v.text, str(v.path or "variant.py"), Config())
    v.found = [(d.cell, d.line, d.code, d.message) for d in res.diagnostics]


def line_text(v: Variant, cell, line) -> str:
    if v.kind == "ipynb":
        nb = json.loads(v.text)
        src = nb["cells"][cell - 1]["source"] if cell else ""
        src = "".join(src) if isinstance(src, list) else src
    else:
        src = v.text
    lines = src.splitlines()
    return lines[line - 1].strip() if 1 <= line <= len(lines) else ""


@dataclass
class Outcome:
    hit: bool
    extra: list
    duplicates: list


def judge(v: Variant) -> Outcome:
    found = {(c, l, code) for c, l, code, _ in v.found}
    counts = Counter((c, l, code) for c, l, code, _ in v.found)
    dups = [k for k, n in counts.items() if n > 1]
    if v.fixture.positive:
        return Outcome(v.expected <= found, sorted(found - v.expected, key=str), dups)
    return Outcome(not v.found, sorted(found, key=str), dups)


def miss_category(v: Variant) -> str:
    codes = {code for _, _, code in v.expected}
    got = {(c, l, code) for c, l, code, _ in v.found}
    if not got:
        return "no finding at all"
    if any(code in codes for _, _, code in got - v.expected):
        return "expected code reported at another line"
    return "only other codes reported"


def report(variants, not_applicable, broken, transforms, markdown=False) -> str:
    proven = [v for v in variants if v.proven]
    rules = [r for r in RULES if any(v.rule == r for v in variants)]
    rows = []
    head = ["transform"] + rules + ["recall", "elsewhere", "neg FP", "dropped", "n/a"]
    totals = defaultdict(lambda: [0, 0])
    all_h = all_p = all_fp = all_neg = all_drop = all_else = 0
    for t in transforms:
        vs = [v for v in proven if v.transform == t.name]
        cells = []
        th = tp = 0
        for r in rules:
            pos = [v for v in vs if v.rule == r and v.fixture.positive]
            h = sum(judge(v).hit for v in pos)
            totals[r][0] += h
            totals[r][1] += len(pos)
            th, tp = th + h, tp + len(pos)
            cells.append(f"{h}/{len(pos)}" if pos else "-")
        elsewhere = sum(1 for v in vs if v.fixture.positive and not judge(v).hit
                        and miss_category(v) == "expected code reported at another line")
        all_else += elsewhere
        negs = [v for v in vs if not v.fixture.positive]
        fp = sum(not judge(v).hit for v in negs)
        dropped = sum(1 for v in variants if v.transform == t.name and not v.proven) + broken[t.name]
        all_h, all_p, all_fp, all_neg, all_drop = all_h + th, all_p + tp, all_fp + fp, all_neg + len(negs), all_drop + dropped
        rows.append([t.name] + cells + [_pct(th, tp), str(elsewhere), f"{fp}/{len(negs)}", str(dropped),
                                        str(not_applicable[t.name])])
    rows.append(["TOTAL"] + [f"{totals[r][0]}/{totals[r][1]}" for r in rules]
                + [_pct(all_h, all_p), str(all_else), f"{all_fp}/{all_neg}", str(all_drop),
                   str(sum(not_applicable.values()))])
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    fmt = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([fmt(head), "-" * len(fmt(head))] + [fmt(r) for r in rows[:-1]] + ["-" * len(fmt(head)), fmt(rows[-1])])


def _pct(h, p) -> str:
    return f"{h}/{p} {100 * h / p:.0f}%" if p else "-"


def json_report(variants, broken_examples, transforms) -> dict:
    misses, fps, extras, dups, dropped = [], [], [], [], defaultdict(list)
    for v in variants:
        base = {"fixture": v.fixture.id, "transform": v.transform, "rule": v.rule,
                "variant": str(v.path) if v.path else None}
        if not v.proven:
            if len(dropped[v.transform]) < 5:
                dropped[v.transform].append(base | {"why": v.why})
            continue
        o = judge(v)
        reported = [{"cell": c, "line": l, "code": code, "message": msg, "text": line_text(v, c, l)}
                    for c, l, code, msg in v.found]
        if v.fixture.positive:
            expected = [{"cell": c, "line": l, "code": code, "text": line_text(v, c, l)}
                        for c, l, code in sorted(v.expected, key=str)]
            if not o.hit:
                misses.append(base | {"category": miss_category(v), "expected": expected, "reported": reported})
            elif o.extra:
                extras.append(base | {"expected": expected, "reported": reported})
        elif not o.hit:
            fps.append(base | {"reported": reported})
        if o.duplicates:
            dups.append(base | {"duplicates": [list(d) for d in o.duplicates]})
    for name, exs in broken_examples.items():
        dropped[name].extend(exs[:5])
    counts = Counter((m["transform"], m["category"]) for m in misses)
    return {
        "summary": {"variants": len(variants), "proven": sum(1 for v in variants if v.proven),
                    "misses": len(misses), "false_positives": len(fps), "positives_with_extra_findings": len(extras),
                    "duplicates": len(dups),
                    "miss_categories": {f"{t}: {c}": n for (t, c), n in sorted(counts.items())}},
        "misses": misses, "false_positives": fps, "extra_findings": extras, "duplicate_findings": dups,
        "dropped_examples": dropped,
    }


def read_known_misses(path: Path = KNOWN_MISSES) -> set[str]:
    if not path.exists():
        return set()
    return {ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")}


def write_known_misses(variants, path: Path = KNOWN_MISSES) -> int:
    """Every proven variant the analyser gets wrong today: positives it misses, then negatives it flags."""
    misses = sorted(v.key for v in variants if v.proven and v.fixture.positive and not judge(v).hit)
    fps = sorted(v.key for v in variants if v.proven and not v.fixture.positive and not judge(v).hit)
    path.write_text("# fixture_id::transform of proven variants the analyser gets wrong today (strict: an entry the\n"
                    "# analyser gets right fails tests/variants/test_variants.py; remove it then).\n"
                    "# Regenerate from a full run: PYTHONPATH=server:tests python -m variants --write-known-misses\n"
                    "# positives missed:\n" + "".join(k + "\n" for k in misses)
                    + "# negatives flagged (false positives):\n" + "".join(k + "\n" for k in fps))
    return len(misses) + len(fps)


def run_harness(*, transforms=None, rule=None, fixture=None, sample=None, seed=0, out_dir=OUT_DIR,
                cache_dir=CACHE_DIR, workers=2, quiet=False, positives_only=False, analyse_variants=True):
    """Build, prove and analyse; returns (variants, not_applicable, broken, broken_examples, timings)."""
    t0 = time.perf_counter()
    transforms = transforms or ALL
    fixtures = [f for f in all_fixtures() if (rule is None or f.path.parent.name == rule)
                and (fixture is None or fixture in f.id) and (f.positive or not positives_only)]
    build_cache = _load_json(cache_dir / "builds.json") if cache_dir else None
    variants, not_applicable, broken, broken_examples = build(fixtures, transforms, sample, seed, workers, build_cache)
    if cache_dir:
        _save_json(cache_dir / "builds.json", build_cache)
    t1 = time.perf_counter()
    write_variants(variants, out_dir)
    ran = prove_all(variants, proof.ProofCache(cache_dir), workers, quiet)
    t2 = time.perf_counter()
    for v in variants:
        if v.proven and analyse_variants:
            analyse(v)
    t3 = time.perf_counter()
    timings = {"build": t1 - t0, "prove": t2 - t1, "proofs_run": ran, "analyse": t3 - t2}
    return variants, not_applicable, broken, broken_examples, timings


def _load_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _save_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / ".gitignore").write_text("*\n")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def parser() -> argparse.ArgumentParser:
    """The options of ``python -m variants`` (``variants.cli`` adds ``--fixes``)."""
    ap = argparse.ArgumentParser(prog="python -m variants", description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, help="prove and analyse a random sample of N variants")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--transform", action="append", help="only this transform (repeatable)")
    ap.add_argument("--rule", help="only fixtures of this rule code (GG001...)")
    ap.add_argument("--fixture", help="only fixtures whose id contains this")
    ap.add_argument("--json", type=Path, default=OUT_DIR / "report.json",
                    help="write the misses / false positives / dropped report here (default .variants_out/report.json)")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    ap.add_argument("--out", type=Path, default=OUT_DIR, help="where variant files are written")
    ap.add_argument("--no-cache", action="store_true", help="run every torch proof again")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--write-known-misses", action="store_true", help=f"rewrite {KNOWN_MISSES.name} from this run")
    return ap


def chosen_transforms(ap: argparse.ArgumentParser, args) -> list:
    from variants.transforms import BY_NAME

    if not args.transform:
        return ALL
    unknown = [n for n in args.transform if n not in BY_NAME]
    if unknown:
        ap.error(f"unknown transform(s) {unknown}; known: {', '.join(BY_NAME)}")
    return [BY_NAME[n] for n in args.transform]


def main(argv=None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    return report_main(args, chosen_transforms(ap, args))


def report_main(args, transforms) -> int:
    """The transform x rule recall table of the analyser on every variant."""
    start = time.perf_counter()
    variants, na, broken, bex, timings = run_harness(
        transforms=transforms, rule=args.rule, fixture=args.fixture, sample=args.sample, seed=args.seed,
        out_dir=args.out, cache_dir=None if args.no_cache else CACHE_DIR, workers=args.workers)
    print(report(variants, na, broken, transforms, markdown=args.markdown))
    data = json_report(variants, bex, transforms)
    s = data["summary"]
    print(f"\n{s['variants']} variants, {s['proven']} proven by torch; {s['misses']} positives missed, "
          f"{s['false_positives']} negatives flagged, {s['positives_with_extra_findings']} positives with extra "
          f"findings, {s['duplicates']} with duplicate findings")
    print(f"time: build {timings['build']:.1f}s, torch proofs {timings['prove']:.1f}s "
          f"({timings['proofs_run']} run, the rest cached), analyser {timings['analyse']:.1f}s, "
          f"total {time.perf_counter() - start:.1f}s")
    print("elsewhere = misses whose expected code was reported at another line (e.g. the call of the helper the "
          "culprit moved into); dropped = variants torch did not confirm (or that did not parse); "
          "n/a = transform does not apply")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=1))
        print(f"report: {args.json}")
    if args.write_known_misses:
        n = write_known_misses(variants)
        print(f"wrote {n} known misses to {KNOWN_MISSES}")
    return 0

