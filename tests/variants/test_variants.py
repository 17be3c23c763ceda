"""CI gate of the variants harness (see README.md here).

- unit tests of the transforms, on every fixture: each applies to a few fixtures, its output parses, the markers
  survive and name lines that exist, and ``reference()`` is left as it was;
- the torch proof really tells broken variants from good ones;
- a seeded sample of variants (GRADGUARD_VARIANTS_SAMPLE, default 250; GRADGUARD_VARIANTS_SEED, default 0) is
  built, proven with torch (no proof cache: every sampled variant really runs) and analysed: no negative variant is
  flagged, no proven positive outside known_misses.txt is missed, and every known miss in the sample is still
  missed (strict, like xfail(strict=True): remove an entry when the analyser starts finding it);
- the sample's positive variants that the analyser finds are probed, and every static explanation (which op saved
  which tensor, which backward fails, loud or silent) agrees with what the probe saw torch do.
"""

from __future__ import annotations

import ast
import os

import libcst as cst
import pytest

from fixture_corpus import all_fixtures
from variants import harness, proof
from variants.transforms import ALL, MARKER

pytest.importorskip("torch")

from agreement import KNOWN_DISAGREEMENTS, agreement  # noqa: E402  (imports torch)
from gradguard.probe import ProbeWorker  # noqa: E402

FIXTURES = all_fixtures()
SAMPLE = int(os.environ.get("GRADGUARD_VARIANTS_SAMPLE", "250"))
SEED = int(os.environ.get("GRADGUARD_VARIANTS_SEED", "0"))


@pytest.fixture(scope="module")
def built():
    """Every transform applied to every fixture once (2 build workers, no cache): {(fixture id, name): text}."""
    pairs = [(fx, t) for t in ALL for fx in FIXTURES]
    results = harness._apply_all(pairs, None, 2)
    return {(fx.id, t.name): res for (fx, t), res in zip(pairs, results)}


def _reference_code(text: str) -> str | None:
    module = cst.parse_module(text)
    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "reference":
            return module.code_for_node(stmt.with_changes(leading_lines=[])).strip()
    return None


def test_at_least_15_transforms_with_names_and_docstrings():
    assert len(ALL) >= 15
    assert len({t.name for t in ALL}) == len(ALL)
    for t in ALL:
        assert t.__doc__ and len(t.__doc__.strip().splitlines()) == 1, t.name


@pytest.mark.parametrize("transform", ALL, ids=lambda t: t.name)
def test_transform_output(transform, built):
    applied = 0
    for fx in FIXTURES:
        status, text = built[(fx.id, transform.name)]
        assert status == "ok", f"{fx.id}: {text}"
        if text is None:
            continue
        applied += 1
        source = fx.path.read_text(encoding="utf-8")
        if transform.kind == "ipynb":
            python, expected = harness.notebook_python(text)
            cells = harness.json.loads(text)["cells"]
            for cell, line, _ in expected:
                src = cells[cell - 1]["source"]
                src = "".join(src) if isinstance(src, list) else src
                assert MARKER.search(src.splitlines()[line - 1])
        else:
            python, expected = text, harness.markers(text)
            lines = text.splitlines()
            for _, line, _ in expected:
                assert MARKER.search(lines[line - 1]), (fx.id, line)
        ast.parse(python)  # parses
        assert python != source, f"{fx.id}: the variant is the fixture"
        # markers: the same codes, as many as the fixture has
        assert sorted(code for _, _, code in expected) == sorted(code for _, code in fx.expected), fx.id
        assert _reference_code(python) == _reference_code(source), f"{fx.id}: reference() changed"
    assert applied >= 3, f"{transform.name} applies to only {applied} fixtures"


_RELAYING = """import torch
import torch.nn as nn


def run():
    model = nn.Sequential(nn.Linear(2, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # expect-if-moved: GG103
    model[0] = nn.Linear(2, 1)  # expect: GG103 caller-bound
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    return [p.grad for p in model.parameters()]


def reference():
    return []
"""


def _expected_texts(text: str) -> list[str]:
    lines = text.splitlines()
    return [lines[line - 1].split("#")[0].strip() for _, line, _ in sorted(harness.markers(text))]


@pytest.mark.parametrize("name", ["helper_function", "module_method", "callable_class", "closure"])
def test_a_moved_caller_bound_line_hands_its_expectation_to_its_expect_if_moved_line(name):
    """Moved into a helper, a caller-bound line's expectation goes to the line of its function that says
    `expect-if-moved`, instead of to the helper's call; left in place, that line is no expectation."""
    transform = next(t for t in ALL if t.name == name)
    assert _expected_texts(transform.apply(_RELAYING)) == ["opt = torch.optim.SGD(model.parameters(), lr=0.1)"]
    without = transform.apply(_RELAYING.replace("  # expect-if-moved: GG103", ""))
    assert len(harness.markers(without)) == 1 and "opt = " not in _expected_texts(without)[0]
    wrapped = next(t for t in ALL if t.name == "wrap_try").apply(_RELAYING)
    assert _expected_texts(wrapped) == ["model[0] = nn.Linear(2, 1)"]


_REBINDING = """import torch
import torch.nn as nn


def run():
    online, target = nn.Linear(2, 2), nn.Linear(2, 2)
    target.load_state_dict(online.state_dict())
    target = online  # expect: GG101 name-bound
    target(torch.ones(1, 2)).sum().backward()
    return [p.grad for p in online.parameters()]


def reference():
    return []
"""


@pytest.mark.parametrize("name, expected", [
    ("helper_function", "target = apply_update(online)"), ("module_method", "target = update_block(online)"),
    ("callable_class", "target = step(online)"), ("closure", "target = online")])
def test_a_moved_name_bound_line_goes_to_the_line_that_binds_the_name(name, expected):
    """A `name-bound` expectation goes to the line that binds the name in its function: the helper's call that
    assigns what the helper returns, or the line itself in a closure that binds the name `nonlocal`."""
    transform = next(t for t in ALL if t.name == name)
    assert _expected_texts(transform.apply(_REBINDING)) == [expected]


def test_proof_tells_broken_variants(tmp_path):
    """A positive whose culprit is made out-of-place, and a negative whose seed changes, are not confirmed."""
    pos = next(f for f in FIXTURES if f.expected_raise and "pos_abs_input_l1_rescale" in f.id)
    neg = next(f for f in FIXTURES if f.id.endswith("GG101/neg_standard_training_loop"))
    bad_pos = tmp_path / "pos.py"
    bad_pos.write_text(pos.path.read_text().replace("d /= d.detach().norm()", "d = d / d.detach().norm()"))
    bad_neg = tmp_path / "neg.py"
    bad_neg.write_text(neg.path.read_text().replace("lr=1e-3", "lr=1e-1").replace(
        "optimizer.zero_grad()\n        loss = F.cross_entropy", "loss = F.cross_entropy"))
    jobs = [
        {"variant": str(pos.path), "original": str(pos.path), "positive": True,
         "expected_raise": pos.expected_raise, "silent": False},
        {"variant": str(bad_pos), "original": str(pos.path), "positive": True,
         "expected_raise": pos.expected_raise, "silent": False},
        {"variant": str(neg.path), "original": str(neg.path), "positive": False, "expected_raise": None,
         "silent": False},
        {"variant": str(bad_neg), "original": str(neg.path), "positive": False, "expected_raise": None,
         "silent": False},
    ]
    assert [ok for ok, _ in proof.run_proofs(jobs, workers=2)] == [True, False, True, False]


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The seeded sample, built, proven (no cache) and analysed once for the tests below."""
    return harness.run_harness(sample=SAMPLE, seed=SEED, out_dir=tmp_path_factory.mktemp("variants"),
                               cache_dir=None, quiet=True)


def test_seeded_sample(sample, capsys):
    variants, na, broken, _, timings = sample
    assert len(variants) == SAMPLE
    assert timings["proofs_run"] == len(variants), "every sampled variant is proven with torch (no cache)"
    proven = [v for v in variants if v.proven]
    dropped = [v for v in variants if not v.proven]
    assert len(dropped) <= 0.05 * len(variants), [(v.key, v.why) for v in dropped]
    known = harness.read_known_misses()
    flagged = [v for v in proven if not v.fixture.positive and not harness.judge(v).hit and v.key not in known]
    missed = [v for v in proven if v.fixture.positive and not harness.judge(v).hit and v.key not in known]
    fixed = [v for v in proven if v.key in known and harness.judge(v).hit]
    with capsys.disabled():
        print(f"\nvariants sample (seed {SEED}): {len(variants)} variants, {len(proven)} proven, "
              f"{sum(v.fixture.positive and harness.judge(v).hit for v in proven)} positives found, "
              f"{sum(v.key in known for v in proven)} known misses; {timings}")
    assert not flagged, "negative variants flagged:\n" + "\n".join(
        f"{v.key} {v.path}: {[(c, l, code) for c, l, code, _ in v.found]}" for v in flagged)
    assert not missed, "new misses (not in known_misses.txt):\n" + "\n".join(
        f"{v.key} {v.path}: expected {sorted(v.expected, key=str)}, got "
        f"{[(c, l, code) for c, l, code, _ in v.found]}" for v in missed)
    assert not fixed, "now found, remove from tests/variants/known_misses.txt:\n" + "\n".join(v.key for v in fixed)


def test_sampled_explanations_agree_with_the_probe(sample, capsys):
    """The static explanation of each found positive variant says what torch does (tests/agreement.py)."""
    variants = sample[0]
    found = [v for v in variants if v.proven and v.fixture.positive and v.kind == "py" and harness.judge(v).hit]
    assert len(found) >= 0.25 * len(variants), "the sample should hold enough found positives to compare"
    with ProbeWorker() as worker:
        known = {(fixture, code, aspect) for fixture, _, code, aspect in KNOWN_DISAGREEMENTS}
        disagreements = [d for v in found for d in agreement(v.path, worker)
                         if (v.fixture.id, d.code, d.aspect) not in known]
    with capsys.disabled():
        print(f"\nagreement on {len(found)} found positive variants: {len(disagreements)} disagreements")
    assert not disagreements, "\n".join(map(str, disagreements))
