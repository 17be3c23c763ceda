"""GG104's fixes proven on the variants of its positives (tests/variants/): every transform of every GG104
positive that torch still breaks, fixed with every fix offered (``--unsafe-fixes``), must run clean with the
gradients of the original fixture's ``reference()`` and leave the analyzer nothing to report.

The fixtures alone are the shapes the fixes were written against; the variants move the loop into helpers,
classes, closures, other spellings, and a fix that is offered there must still be right.
"""

from __future__ import annotations

import importlib.util
import itertools
import warnings
from pathlib import Path

import pytest
from fixture_corpus import all_fixtures
from gradients import grads_equal
from gradguard.api import analyze_source
from gradguard.cli import main
from gradguard.config import Config
from variants.harness import build
from variants.transforms import ALL

torch = pytest.importorskip("torch")

POSITIVES = [fx for fx in all_fixtures() if fx.positive and fx.path.parent.name == "GG104"]
_counter = itertools.count()


@pytest.fixture(scope="module")
def variants():
    built, _, _, _ = build(POSITIVES, [t for t in ALL if t.kind == "py"], workers=1)
    return built


def _run(path: Path, function: str):
    spec = importlib.util.spec_from_file_location(f"loop_variant_{next(_counter)}", path)
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec.loader.exec_module(module)
        return getattr(module, function)()


def _breaks(path: Path, expected_raise: str) -> bool:
    """torch confirms the variant: run() raises the fixture's error."""
    try:
        _run(path, "run")
    except RuntimeError as exc:
        return str(exc).startswith(expected_raise)
    except Exception:  # noqa: BLE001 - a variant that fails otherwise proves nothing
        return False
    return False


def test_every_fix_offered_on_a_gg104_variant_is_proven(variants, tmp_path):
    fixed_count, by_title = 0, {}
    failures = []
    for v in variants:
        found = analyze_source(v.text, "variant.py", Config(jedi=False)).diagnostics
        titles = [d.fix.title for d in found if d.code == "GG104" and d.fix is not None]
        if not titles:
            continue
        folder = tmp_path / f"v{next(_counter)}"
        folder.mkdir()
        fixed = folder / "variant.py"
        fixed.write_text(v.text, encoding="utf-8")
        if not _breaks(fixed, v.fixture.expected_raise):
            continue  # the transform changed what torch does: nothing to prove
        main(["check", "--no-jedi", "--jobs", "1", "--quiet", "--exit-zero", "--fix", "--unsafe-fixes", str(fixed)])
        fixed_text = fixed.read_text(encoding="utf-8")
        if fixed_text == v.text:
            failures.append(f"{v.key}: a fix is offered ({titles[0]}) but --fix changed nothing")
            continue
        try:
            got = _run(fixed, "run")
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{v.key}: the fixed variant raises {type(exc).__name__}: {str(exc)[:100]}")
            continue
        if not grads_equal(got, _run(v.fixture.path, "reference")):
            failures.append(f"{v.key}: the fixed variant's gradients differ from reference()")
            continue
        left = [d for d in analyze_source(fixed_text, "fixed.py", Config(jedi=False)).diagnostics if d.code == "GG104"]
        if left:
            failures.append(f"{v.key}: the analyzer still finds {[(d.line, d.code) for d in left]}")
            continue
        fixed_count += 1
        for title in titles:
            kind = title.split(":")[0].split(" (")[0].split(" `")[0]
            by_title[kind] = by_title.get(kind, 0) + 1
    print(f"\nGG104 variants fixed and proven: {fixed_count} of {len(variants)} built; {by_title}")
    assert not failures, "\n".join(failures)
    assert any(k.startswith("Collect the steps") for k in by_title), by_title
