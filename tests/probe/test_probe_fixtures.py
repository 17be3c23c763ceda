"""The probe on the whole fixture corpus: it confirms every positive at its `# expect:` line and
reports nothing on any negative.  Each fixture is probed with `--entry run` (import, call run()).

All fixtures are probed once per session, by warm workers (torch imported once each; one forked child
per fixture), two at a time (``probe_corpus``, once per session: the ``corpus`` fixture of conftest.py, shared with test_agreement.py); the
parametrized tests then check each result.
"""

from __future__ import annotations

import importlib.util
import os
import re
import statistics
import warnings
from pathlib import Path

import pytest

from probe_corpus import DEVICE, FIXTURES, PROBE_BLIND, PROBE_UNREACHED, WORKERS
from fixture_corpus import Fixture

torch = pytest.importorskip("torch")

# A positive's expected code -> the probe codes that confirm it.  An element loop (GG104) is, to torch,
# a saved tensor modified (GG001), a leaf (GG002) or a view of a leaf (GG003) written in place.
ACCEPT = {"GG104": {"GG001", "GG002", "GG003", "GG104"}}


def _lines(result) -> dict[int, set[str]]:
    found: dict[int, set[str]] = {}
    for f in result.findings:
        for path, line in f.lines:
            if os.path.realpath(path) == os.path.realpath(result.path):
                found.setdefault(line, set()).add(f.code)
    return found


@pytest.mark.parametrize("fx", [f for f in FIXTURES if f.positive], ids=lambda f: f.id)
def test_probe_confirms_positive(fx: Fixture, corpus):
    result = corpus["results"][fx.id]
    assert result.status in ("completed", "raised"), (result.status, result.detail)
    assert result.device == DEVICE
    found = _lines(result)
    unreached = PROBE_UNREACHED.get(fx.id, (None, ""))[0]
    missing = [(line, code) for line, code in sorted(fx.expected)
               if line != unreached and not found.get(line, set()) & ACCEPT.get(code, {code})]
    shown = [(f.code, f.kind, f.site.line, [c.line for c in f.callers], [o.line for o in f.origins])
             for f in result.findings]
    if fx.id in PROBE_BLIND:  # strict: once the probe confirms it, the entry goes
        assert missing, f"the probe confirms {fx.id} now: delete it from PROBE_BLIND ({shown})"
        return
    assert not missing, f"expected {missing}, the probe reported {shown}"
    if fx.expected_raise is not None:
        assert result.exception is not None and result.exception["finding"], result.exception


@pytest.mark.parametrize("fx", [f for f in FIXTURES if not f.positive], ids=lambda f: f.id)
def test_probe_is_silent_on_negative(fx: Fixture, corpus):
    result = corpus["results"][fx.id]
    assert result.status == "completed", (result.status, result.detail)
    assert result.findings == [], [(f.code, f.kind, f.site.line, f.message) for f in result.findings]
    assert not result.sandbox.get("tracer_errors")


def _torch_says(fx: Fixture) -> str:
    spec = importlib.util.spec_from_file_location(f"probe_fixture_{fx.path.parent.name}_{fx.path.stem}", fx.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError) as info, torch.device(DEVICE):
            module.run()
    return str(info.value)


SAVED_RAISE = [f for f in FIXTURES if f.expected_raise and "modified by an inplace operation" in f.expected_raise]


@pytest.mark.parametrize("fx", SAVED_RAISE, ids=lambda f: f.id)
def test_probe_carries_torchs_exact_message(fx: Fixture, corpus):
    """Saved-tensor hooks switch torch's own version check off; the probe's replacement must say,
    word for word, what torch says without the probe."""
    result = corpus["results"][fx.id]
    expected = _torch_says(fx)
    said = [f.torch_message for f in result.findings if f.torch_message]
    assert expected in said, (expected, said)
    backward_notes = [n for f in result.findings for n in f.notes if n.message.startswith("backward() raises")]
    assert backward_notes, "a raised finding names the backward() line"


def test_corpus_timing(corpus):
    results = corpus["results"].values()
    overheads = [r.total_seconds - r.seconds for r in results]
    median = statistics.median(overheads)
    print(f"\nprobe corpus: {len(FIXTURES)} fixtures, {WORKERS} warm workers; start {corpus['startup']:.1f} s, "
          f"probing {corpus['probing']:.1f} s; per-probe latency beyond the script: median {median * 1000:.0f} ms, "
          f"max {max(overheads) * 1000:.0f} ms")
    assert median < 0.25, "a warm worker answers within ~100 ms of the script's own run (bench/bench_probe.py)"


# The few fixed phrases the probe's explanations quote, whatever the user wrote.
_VOCABULARY = {".data", "float()", ".item()", "out=", "inplace=True"}
_QUOTED = re.compile(r"`([^`]+)`")


def _said_outside_source(text: str, sources: str) -> list[str]:
    """The spans quoted in ``text`` that are neither in the user's source nor a fixed phrase."""
    flat = re.sub(r"\s+", "", sources)
    return [span for span in _QUOTED.findall(text)
            if span not in _VOCABULARY and re.sub(r"\s+", "", span.rstrip("…")) not in flat]


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda f: f.id)
def test_probe_names_the_users_expressions(fx: Fixture, corpus):
    """What the probe says quotes the user's code (`optimizer.step()`, `h.data[pad] = 0`, `self.fc(x)`),
    never torch's internal op names (`addcdiv_`, `index_put_`, `addmm`) where there is a source line."""
    result = corpus["results"][fx.id]
    for f in result.findings:
        paths = {s.path for s in (f.site, *f.callers, *f.origins, *(n.site for n in f.notes))}
        sources = "\n".join(Path(p).read_text(encoding="utf-8") for p in paths if Path(p).is_file())
        torch_said = (f.torch_message or "").split("\n")[0]
        texts = [f.message.replace(torch_said, "")] + [n.message.replace(torch_said, "") for n in f.notes]
        unsourced = [span for text in texts for span in _said_outside_source(text, sources)]
        assert not unsourced, (f.code, f.site.line, f.message, unsourced)
