"""Issue 31 (part 2): the probe's finding sits at the line the user must change, for the bugs only the probe
can see: writes inside a custom autograd.Function's backward (to a tensor another node saved, or to the
gradient it is handed), a module full backward hook's view overwritten by a later in-place module, a forward
hook that keeps an output a later in-place module overwrites, or that rebinds its output and drops it.

The programs are the probe-only fixtures (tests/fixtures/probe_only/): each is first run with torch (the
header's claim), then probed with ``--entry run``: every ``# expect:`` line is a finding's own line, and a
negative gets no finding at all."""

from __future__ import annotations

import importlib.util
import os
import warnings

import pytest

from fixture_corpus import Fixture
from gradients import grads_equal
from probe_corpus import DEVICE, PROBE_ONLY

torch = pytest.importorskip("torch")

from gradguard.probe import ProbeOptions  # noqa: E402


def _load(fx: Fixture):
    spec = importlib.util.spec_from_file_location(f"probe_only_{fx.path.parent.name}_{fx.path.stem}", fx.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_probe_only_fixtures_of_each_kind():
    assert sum(f.positive for f in PROBE_ONLY) >= 4 and sum(not f.positive for f in PROBE_ONLY) >= 1


@pytest.mark.parametrize("fx", PROBE_ONLY, ids=lambda f: f.id)
def test_torch_agrees(fx: Fixture):
    if fx.positive:
        assert fx.expected and (fx.expected_raise is None) != (not fx.silent)
    else:
        assert not fx.expected and fx.expected_raise is None and not fx.silent
    module = _load(fx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = module.reference()
        if fx.expected_raise is not None:
            with pytest.raises(RuntimeError) as info:
                module.run()
            assert str(info.value).splitlines()[0].startswith(fx.expected_raise)
            return
        result = module.run()
    assert grads_equal(result, reference) != fx.silent


@pytest.mark.parametrize("fx", PROBE_ONLY, ids=lambda f: f.id)
def test_probe_reports_the_marked_lines(fx: Fixture, worker):
    result = worker.probe(fx.path, ProbeOptions(entry="run", timeout=60, device=DEVICE))
    here = os.path.realpath(fx.path)
    shown = [(f.code, f.kind, f.site.line, f.message[:120]) for f in result.findings]
    assert not result.sandbox.get("tracer_errors"), result.sandbox.get("tracer_errors")
    if not fx.positive:
        assert result.status == "completed", (result.status, result.detail)
        assert result.findings == [], shown
        return
    assert result.status in ("completed", "raised"), (result.status, result.detail)
    found = {(f.site.line, f.code) for f in result.findings if os.path.realpath(f.site.path) == here}
    assert set(fx.expected) <= found, (sorted(fx.expected), shown)
    if fx.expected_raise is not None:
        # torch's own message, word for word, although the probe's saved-tensor hooks switch its check off
        assert result.exception is not None and result.exception["finding"], result.exception
        module = _load(fx)
        with warnings.catch_warnings(), pytest.raises(RuntimeError) as info:
            warnings.simplefilter("ignore")
            module.run()
        assert str(info.value) in [f.torch_message for f in result.findings if f.torch_message]


INPLACE_MODULE = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(4, 6),
    nn.Sigmoid(),
    nn.Dropout(p=0.5, inplace=True),
    nn.Linear(6, 1),
)
model(torch.randn(3, 4)).sum().backward()
"""


def test_an_inplace_module_is_reported_where_it_is_made(script, probe):
    """The write runs inside torch's Dropout, called from `model(...)`: the line to change is the constructor."""
    result = probe(script(INPLACE_MODULE))
    found = [f for f in result.findings if f.code == "GG005"]
    assert found, [(f.code, f.site.line) for f in result.findings]
    assert found[0].site.line == 8
    assert 11 in [c.line for c in found[0].callers]


HELPER_STEP = """\
import torch
import torch.nn as nn


def update(optimizer, loss):
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


torch.manual_seed(0)
net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(5, 3)
first = net(x).pow(2).mean()
second = net(x).abs().mean()
update(opt, first)
update(opt, second)
"""


def test_a_step_inside_a_helper_is_reported_where_the_order_is(script, probe):
    """Both the step and the backward run in `update`; the graph of `second` was built before the first update:
    the line to change is that forward (line 16), in the function that calls both updates."""
    result = probe(script(HELPER_STEP))
    found = [f for f in result.findings if f.code == "GG101" and f.kind == "raised"]
    assert found, [(f.code, f.kind, f.site.line) for f in result.findings]
    assert found[0].site.line == 16
    assert {8, 17} <= {o.line for o in found[0].origins}  # the step, and the call that runs it
    assert found[0].backward is not None and found[0].backward.line == 7


NUMBER_LOSS = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
policy = nn.Linear(4, 3)


def reinforce(states, actions, rewards):
    loss = 0.0
    for s, a, r in zip(states, actions, rewards):
        log_probs = torch.log_softmax(policy(s), dim=-1)
        loss -= log_probs[a].item() * r
    loss.backward()


reinforce(torch.randn(3, 4), [0, 2, 1], [1.0, 0.5, 2.0])
"""


def test_backward_on_a_number_names_the_read(script, probe):
    """`loss.backward()` on a float raises AttributeError; the line to change is the `.item()` read."""
    result = probe(script(NUMBER_LOSS))
    assert result.exception is not None and result.exception["type"] == "AttributeError"
    assert result.exception["finding"], result.exception
    found = [f for f in result.findings if f.code == "GG103"]
    assert [f.site.line for f in found] == [12], [(f.code, f.site.line) for f in result.findings]
    assert 13 in [o.line for o in found[0].origins]


DATA_NUMPY = """\
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
lin = nn.Linear(4, 3)
h = lin(torch.randn(5, 4))
scale = torch.from_numpy(np.abs(h.data.numpy()).mean(0, keepdims=True))
(h / (scale + 1.0)).sum().backward()
"""


def test_values_read_through_data_numpy_and_rebuilt(script, probe):
    """`.data.numpy()` reads values out of the graph as `.detach().numpy()` does: rebuilt into a tensor that
    reaches the backward, the gradient through them is dropped (a graph break at the rebuild)."""
    result = probe(script(DATA_NUMPY))
    found = [f for f in result.findings if f.code == "GG103"]
    assert [f.site.line for f in found] == [8], [(f.code, f.site.line) for f in result.findings]


def test_a_finding_placed_at_the_line_to_change_is_kept_beside_the_static_one():
    """The static rule flags the write (line 45); the probe places its finding at `out = x` (line 44), with the
    write among its origins: the static finding is confirmed, and the probe's line is reported too."""
    from gradguard.diagnostics import Diagnostic, Severity, Span
    from gradguard.probe import ProbeResult
    from gradguard.probe.merge import ALIAS_NOTE, merge
    from gradguard.probe.model import Note, ProbeFinding, Site

    path = "/project/train.py"
    static = Diagnostic("train.py", Span(45, 5, 45, 20), "GG001", Severity.WARNING, "static GG001 on 45", ())
    placed = ProbeFinding("GG001", "raised", Site(path, 44, 9), "probe GG001 on 44",
                          notes=(Note(Site(path, 45, 9), ALIAS_NOTE),), origins=(Site(path, 45, 9),))
    merged = merge([static], ProbeResult(path, "raised", findings=[placed], device="cpu"), "train.py")
    assert sorted((d.span.line, d.confirmed) for d in merged) == [(44, True), (45, True)]
    at_write = next(d for d in merged if d.span.line == 45)
    assert any(r.line == 44 and "the line to change" in r.message for r in at_write.related)


def test_a_write_the_static_analysis_moved_to_a_call_is_also_reported_in_its_own_file():
    """A write inside another module of the project is reported by the static analysis at the call in the analysed
    file (it reports in that file only); the probe ran the other file and saw the write there: the static finding
    is confirmed at the call, and the probe's finding is reported at the write too."""
    from gradguard.diagnostics import Diagnostic, Related, Severity, Span
    from gradguard.probe import ProbeResult
    from gradguard.probe.merge import merge
    from gradguard.probe.model import ProbeFinding, Site

    entry, helper = "/project/pkg/main.py", "/project/pkg/layers.py"
    static = Diagnostic("main.py", Span(41, 5, 41, 20), "GG003", Severity.WARNING, "static GG003 at the call",
                        (Related("layers.py", 13, 9, "the write, inside this call"),))
    at_write = ProbeFinding("GG003", "raised", Site(helper, 13, 9), "probe GG003 at the write",
                            callers=(Site(entry, 41, 5),))
    merged = merge([static], ProbeResult(entry, "raised", findings=[at_write], device="cpu"), "main.py")
    assert sorted((os.path.basename(d.path), d.span.line, d.confirmed) for d in merged) == [
        ("layers.py", 13, True), ("main.py", 41, True)]
