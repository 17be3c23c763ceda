"""Every fix proven on the variants of every positive (tests/variants/fix_proof.py): each torch-proven positive
variant that ``gradguard check --fix --unsafe-fixes`` changes must run clean with the gradients of the original
fixture's ``reference()``, leave the analyser nothing to report, and not change under a second ``--fix``.

CI runs a seeded sample (``GRADGUARD_FIX_VARIANTS_SAMPLE`` positive variants, default 600;
``GRADGUARD_FIX_VARIANTS_SEED``, default 0), with no cache: every sampled variant is proven by torch and every
fix really runs.  ``make fix-variants`` runs them all and prints the per-rule table.
"""

from __future__ import annotations

import os

import pytest
from fixture_corpus import all_fixtures
from variants import fix_proof, harness

pytest.importorskip("torch")

SAMPLE = int(os.environ.get("GRADGUARD_FIX_VARIANTS_SAMPLE", "600"))
SEED = int(os.environ.get("GRADGUARD_FIX_VARIANTS_SEED", "0"))
# The share of sampled positive variants with a proven fix may not fall below today's (57 % in the full run;
# issue 15 aims at 85 %): raise it as fixes are added.
FLOOR = 0.5


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("fix_variants")
    variants, _, _, _, _ = harness.run_harness(sample=SAMPLE, seed=SEED, out_dir=out, cache_dir=None, quiet=True,
                                               positives_only=True, analyse_variants=False)
    return fix_proof.prove_fixes([v for v in variants if v.proven], None, workers=2)


def test_every_fix_offered_on_a_sampled_variant_is_proven(results, capsys):
    with capsys.disabled():
        print("\n" + fix_proof.table(results))
    failed = fix_proof.failures(results)
    assert not failed, "\n".join(f"{f['variant']}: {f['why']} [{'; '.join(f['titles'])}]" for f in failed)


def test_the_sample_spans_the_rules_and_most_variants_get_a_proven_fix(results):
    rules = {v.rule for v, _ in results}
    assert len(rules) >= len({fx.path.parent.name for fx in all_fixtures() if fx.positive}) - 1, rules
    proven = sum(res["status"] == fix_proof.PROVEN for _, res in results)
    assert proven >= FLOOR * len(results), f"{proven} of {len(results)} sampled positive variants have a proven fix"


def test_the_proof_rejects_a_wrong_fix(tmp_path):
    """A 'fix' that leaves the write in place fails the proof: torch still raises on the program."""
    fx = next(f for f in all_fixtures() if f.positive and f.expected_raise and f.path.parent.name == "GG001")
    job = {"text": fx.path.read_text(encoding="utf-8"), "kind": "py", "rule": "GG001", "original": str(fx.path)}
    same = tmp_path / "same.py"
    same.write_text(job["text"], encoding="utf-8")
    res = fix_proof.check_fixed(job, same, ["a fix that changes nothing"])
    assert res["status"] == fix_proof.FAILED and "raises RuntimeError" in res["why"], res
    assert fix_proof.prove_fix(job)["status"] == fix_proof.PROVEN  # the real fix, on the fixture itself
