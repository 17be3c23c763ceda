"""The tracer in this process (no sandbox): it must not change what the program computes, must let
graphs go, and must judge storage overlap exactly."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import pytest

from fixture_corpus import FIXTURES as FIXTURE_ROOT
from fixture_corpus import Fixture, all_fixtures

torch = pytest.importorskip("torch")

from gradguard.probe.geometry import overlaps  # noqa: E402
from gradguard.probe.tracer import Tracer, UserCode  # noqa: E402

HERE = str(Path(__file__).parent)


def _geometry(t):
    return t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.element_size()


def test_overlap_is_exact_for_strided_views():
    base = torch.zeros(4, 24)
    a, b, c = base.unsafe_chunk(3, dim=1)  # column blocks: interleaved byte ranges, disjoint elements
    assert not overlaps(_geometry(a), _geometry(b))
    assert overlaps(_geometry(a), _geometry(a[:, 2:5]))
    assert overlaps(_geometry(base), _geometry(c))
    assert not overlaps(_geometry(base[0]), _geometry(base[1]))
    assert overlaps(_geometry(base[:, 0]), _geometry(base[3]))
    assert not overlaps(_geometry(base[:0]), _geometry(base))
    assert not overlaps(_geometry(base[::2]), _geometry(base[1::2]))


def test_overlap_agrees_with_a_mask_on_random_views():
    import random

    rng = random.Random(7)
    base = torch.zeros(6, 8, 5)

    def view():
        v = base
        for dim in range(3):
            start = rng.randrange(v.shape[dim])
            v = v.narrow(dim, start, rng.randrange(v.shape[dim] - start) + 1)
            v = v[(slice(None),) * dim + (slice(None, None, rng.choice([1, 1, 2, 3])),)]
        return v.transpose(0, 2) if rng.random() < 0.3 else v

    for _ in range(500):
        a, b = view(), view()
        mask = torch.zeros(base.numel(), dtype=torch.bool)
        mask.as_strided(a.shape, a.stride(), a.storage_offset()).fill_(True)
        truth = bool(mask.as_strided(b.shape, b.stride(), b.storage_offset()).any())
        assert overlaps(_geometry(a), _geometry(b)) == truth


def test_graphs_are_released_after_backward():
    """The pack hook must not hold outputs strongly (a reference cycle would keep every graph alive)."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1), torch.nn.Sigmoid())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tracer = Tracer(UserCode([HERE]))
    with tracer:
        for _ in range(20):
            loss = model(torch.randn(4, 8)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        kept_after_backward = sum(len(b) for b in tracer.pending.values())
        dropped = model(torch.randn(4, 8)).sum()  # a graph never backwarded...
        del dropped  # ...and dropped
    assert kept_after_backward == 0
    assert tracer.pending == {}
    assert tracer.findings() == []


def test_a_write_to_a_dropped_graph_is_not_a_finding():
    x = torch.randn(3, requires_grad=True)
    tracer = Tracer(UserCode([HERE]))
    with tracer:
        y = torch.sigmoid(x)  # saves its output...
        kept = y.detach()
        del y  # ...until the graph goes: nobody can backward through it any more
        kept.add_(1)
        h = torch.tanh(x)
        h.add_(1)  # but h still holds its graph: a backward through it would raise
    [finding] = tracer.findings()
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "h.add_(1)  # but" in text)
    assert (finding.code, finding.kind, finding.site.line, finding.severity) == ("GG001", "pending", line, "warning")


def test_silent_data_write_found_in_process():
    w = torch.randn(3, 3, requires_grad=True)
    tracer = Tracer(UserCode([HERE]))
    with tracer:
        out = (w * w).sum()  # mul saves both operands
        w.data.mul_(0.5)
        out.backward()
    [finding] = tracer.findings()
    assert (finding.code, finding.kind, finding.op) == ("GG102", "silent", "mul_")


class _RowWrite(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.proj(x)
        self.scale = h.norm()  # saves h; the graph stays on the module
        h[0] = 0.0
        return h


def test_a_compiled_module_runs_the_tracer_as_plain_python():
    """Under an active dispatch mode a compiled module runs eagerly, but Dynamo compiled the tracer's own frames
    (``__torch_dispatch__`` and what it calls: 53 frames, 30 s for one step) unless they are marked skipped."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = torch.compile(_RowWrite())
    tracer = Tracer(UserCode([HERE]))
    with tracer:
        model(torch.randn(3, 4)).sum().backward()
    compiled = {k: dict(v) for k, v in counters.items() if k in ("frames", "stats")}
    torch._dynamo.reset()
    assert compiled == {}
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "h[0] = 0.0" in text)
    assert [(f.code, f.kind, f.site.line) for f in tracer.findings()] == [("GG001", "pending", line)]


def _load(fx: Fixture):
    spec = importlib.util.spec_from_file_location(f"tracer_fixture_{fx.path.parent.name}_{fx.path.stem}", fx.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _same(a, b) -> bool:
    return len(a) == len(b) and all(
        (x is None and y is None) or (x is not None and y is not None and torch.equal(x, y)) for x, y in zip(a, b))


UNCHANGED = [f for f in all_fixtures() if not f.positive or f.silent]


@pytest.mark.parametrize("fx", UNCHANGED, ids=lambda f: f.id)
def test_tracer_does_not_change_the_gradients(fx: Fixture):
    """Negatives and silent positives compute bit-for-bit the same gradients under the tracer."""
    module = _load(fx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = module.run()
        tracer = Tracer(UserCode([str(FIXTURE_ROOT)]))
        with tracer:
            traced = module.run()
    assert _same(plain, traced)
    assert not tracer.internal_errors
