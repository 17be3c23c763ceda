"""Static explanations agree with what torch does, on every positive fixture where both sides report.

For each positive fixture, the static analysis's explanation of each mutation finding (``gradguard.explanation``)
is compared with the probe's finding at the same line (``tests/agreement.py``): loud or silent, the code, the
saving op's line, its name as torch runs it, the saved tensor's role, the failing backward, and for GG004 the
multi-view node and function.  Each disagreement is a defect in one side; the ones not fixed yet are listed in
``EXPECTED`` with a reason, and an entry that starts agreeing fails the test (delete it).
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from agreement import KNOWN_DISAGREEMENTS, Disagreement, compare, compare_file, static_explanations
from gradguard.explanation import AT_BACKWARD, AT_WRITE, SILENT
from gradguard.probe.model import Site
from probe_corpus import FIXTURES, PROBE_BLIND

POSITIVES = [f for f in FIXTURES if f.positive]

EXPECTED = KNOWN_DISAGREEMENTS  # (fixture, line, code, aspect) -> why: tests/agreement.py


@pytest.fixture(scope="module")
def reports(corpus):
    started = time.monotonic()
    found = {fx.id: compare_file(fx.path, corpus["results"][fx.id]) for fx in POSITIVES}
    found["_seconds"] = time.monotonic() - started
    return found


def test_static_explanations_agree_with_the_probe(reports):
    seconds = reports.pop("_seconds")
    compared = {k: r for k, r in reports.items() if r.compared}
    pairs = sum(r.compared for r in compared.values())
    found = {d.key: d for r in reports.values() for d in r.disagreements}
    print(f"\nagreement: {len(compared)} fixtures, {pairs} findings compared with the probe, "
          f"{pairs - len(found)} agree, {len(found)} disagree; compared in {seconds:.1f} s")
    unexpected = [str(d) for key, d in found.items() if key not in EXPECTED]
    assert not unexpected, "static explanation and probe disagree:\n" + "\n".join(unexpected)
    stale = [key for key in EXPECTED if key not in found]
    assert not stale, f"these now agree; remove them from EXPECTED: {stale}"


def test_every_mutation_fixture_is_compared(reports):
    """Matching must find the probe's finding for each fixture with a static mutation finding (GG103 has no
    explanation): a comparison that silently matches nothing would agree with everything."""
    reports.pop("_seconds", None)
    missing = {fx.id for fx in POSITIVES if static_explanations(fx.path) and not reports[fx.id].compared}
    explained = {fx.id for fx in POSITIVES if fx.id in PROBE_BLIND and static_explanations(fx.path)}
    assert missing == explained, "update PROBE_BLIND (tests/probe_corpus.py): the probe now reports these"


def _pair(corpus, fixture_id: str):
    fx = next(f for f in POSITIVES if f.id == fixture_id)
    result = corpus["results"][fixture_id]
    line, explanation = static_explanations(fx.path)[0]
    probed = next(f for f in result.findings if line in {n for _, n in f.lines})
    assert compare(fx.path, line, explanation, probed) == []
    return fx.path, line, explanation, probed


def _aspects(disagreements: list[Disagreement]) -> set[str]:
    return {d.aspect for d in disagreements}


def test_the_comparison_can_fail(corpus):
    """Each claim, contradicted on its own, is a disagreement."""
    path, line, e, f = _pair(corpus, "GG001/pos_imul_after_sigmoid_gate")
    assert e.kind == AT_BACKWARD and e.saving_op == "torch.sigmoid" and e.save_role == "output"
    save = f.saves[0]
    elsewhere = dataclasses.replace(save, site=Site(save.site.path, save.site.line + 1))
    assert _aspects(compare(path, line, e, dataclasses.replace(f, saves=(elsewhere,)))) == {"save line"}
    assert _aspects(compare(path, line, e, dataclasses.replace(f, saves=(dataclasses.replace(save, op="tanh"),)))) \
        == {"saving op"}
    assert _aspects(compare(path, line, e, dataclasses.replace(f, saves=(dataclasses.replace(save, role="input"),)))) \
        == {"role"}
    assert _aspects(compare(path, line, e, dataclasses.replace(f, kind="silent", code="GG102"))) == {"family"}
    assert _aspects(compare(path, line, e, dataclasses.replace(f, code="GG005"))) == {"code"}
    assert _aspects(compare(path, line, dataclasses.replace(e, saving_op="nn.Linear"), f)) == {"saving op"}

    path, line, e, f = _pair(corpus, "GG001/pos_isub_after_exp_rate")
    assert e.backward_line is not None
    moved = Site(f.backward.path, f.backward.line + 1)
    assert _aspects(compare(path, line, e, dataclasses.replace(f, backward=moved))) == {"backward line"}

    path, line, e, f = _pair(corpus, "GG004/pos_attention_qkv_chunk_scale")
    assert e.kind == AT_WRITE and e.view_call == "chunk" and e.multi_view == "Split" and not e.through_view
    assert _aspects(compare(path, line, e, dataclasses.replace(f, view_node="Unbind"))) == {"multi-view"}
    assert _aspects(compare(path, line, dataclasses.replace(e, view_call="unbind"), f)) == {"multi-view function"}

    path, line, e, f = _pair(corpus, "GG102/pos_prune_data_mask_assign")
    assert e.kind == SILENT and e.saving_op == "nn.Linear" and e.save_role == "weight"
