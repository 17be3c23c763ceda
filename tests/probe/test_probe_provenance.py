"""Graph breaks found by following read values (probe/provenance.py), in this process: each case is
run under the tracer and, beside it, without it, so the test also shows what torch does."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from gradguard.probe.tracer import Tracer, UserCode  # noqa: E402

HERE = str(Path(__file__).parent)
pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True to a scalar")


def _probe(body):
    tracer = Tracer(UserCode([HERE]))
    with tracer:
        grads = body()
    return tracer.findings(), grads


def _lines(findings, code="GG103"):
    return sorted(f.site.line for f in findings if f.code == code)


def _line_of(marker: str) -> int:
    for number, text in enumerate(Path(__file__).read_text().splitlines(), 1):
        if text.rstrip().endswith(f"# {marker}"):
            return number
    raise AssertionError(marker)


def _gate_mixing():
    torch.manual_seed(0)
    gate = torch.nn.Parameter(torch.tensor(0.3))
    w = torch.nn.Parameter(torch.randn(4))
    alpha = float(torch.sigmoid(gate))  # read-float
    loss = (alpha * w).sum() + ((1 - alpha) * w.pow(2)).sum()
    loss.backward()
    return gate.grad, w.grad


def test_a_float_read_on_one_line_and_used_on_the_next_is_a_graph_break():
    findings, (gate_grad, _) = _probe(_gate_mixing)
    assert gate_grad is None  # what the finding is about: torch gives the gate no gradient
    assert _lines(findings) == [_line_of("read-float")]
    (finding,) = findings
    assert [n.site.line for n in finding.notes] == [_line_of("read-float") + 1, _line_of("read-float") + 2]


def _numpy_round_trip():
    w = torch.nn.Parameter(torch.randn(5))
    curve = w.cumsum(0)
    penalty = np.square(np.diff(curve.detach().numpy()))  # numpy-read
    loss = curve.sum() + torch.from_numpy(penalty).sum()  # numpy-back
    loss.backward()
    return w.grad


def test_a_numpy_round_trip_is_followed_through_numpy():
    # Reported where the values leave the graph (the line to change: keep the tensor), the rebuild as a note.
    findings, _ = _probe(_numpy_round_trip)
    assert _lines(findings) == [_line_of("numpy-read")]
    assert [n.site.line for n in findings[0].notes][0] == _line_of("numpy-back")


def _tensor_of_losses():
    w = torch.nn.Parameter(torch.randn(3))
    a, b = (w * 2).sum(), (w * 3).sum()
    total = torch.tensor([a, b], requires_grad=True).sum()  # tensor-of-losses
    total.backward()
    return w.grad


def test_torch_tensor_of_losses_backpropagates_nothing_and_is_found():
    findings, w_grad = _probe(_tensor_of_losses)
    assert w_grad is None
    assert _lines(findings) == [_line_of("tensor-of-losses")]


def _tolist_rebuild():
    w = torch.nn.Parameter(torch.randn(4))
    scores = w * 1.5
    values = scores.tolist()  # tolist-read
    loss = (torch.tensor(values) * w).sum()  # tolist-back
    loss.backward()
    return w.grad


def test_tolist_values_rebuilt_on_a_later_line():
    findings, _ = _probe(_tolist_rebuild)
    assert _lines(findings) == [_line_of("tolist-read")]
    assert findings[0].origins[0].line == _line_of("tolist-back")


def _reads_for_logging_and_control():
    w = torch.nn.Parameter(torch.randn(4))
    history = []
    for _ in range(3):
        loss = (w * 1.5).pow(2).sum()
        history.append(loss.item())
        if loss.item() > 1e9:
            break
        loss.backward()
        metrics = torch.tensor(history)  # a tensor of logged values that never reaches backward
        assert metrics.numel() > 0
        w.grad = None
    print(np.mean(w.detach().numpy()))
    return w


def test_reads_for_logging_and_control_flow_are_not_findings():
    findings, _ = _probe(_reads_for_logging_and_control)
    assert findings == []


def _stop_gradient_as_a_tensor():
    w = torch.nn.Parameter(torch.randn(4))
    z = w * 2
    target = z.detach()  # an intended stop-gradient: it stays a tensor
    loss = ((z - target.roll(1)) ** 2).sum()
    loss.backward()
    return w.grad


def test_detach_kept_as_a_tensor_is_not_a_finding():
    findings, _ = _probe(_stop_gradient_as_a_tensor)
    assert findings == []


def test_factories_and_readers_are_restored_and_unchanged():
    originals = (torch.tensor, torch.as_tensor, torch.asarray, torch.from_numpy, torch.Tensor.new_tensor,
                 torch.Tensor.tolist, torch.Tensor.numpy)
    w = torch.nn.Parameter(torch.randn(3))

    def body():
        array = w.detach().numpy()
        assert isinstance(array, np.ndarray)
        assert type(np.square(array).sum()) is np.float32  # reductions stay plain scalars
        assert np.array(array).__class__ is np.ndarray
        assert torch.as_tensor(w) is w  # as_tensor of a tensor keeps it, graph and all
        return torch.tensor([1.5, 2.5]).tolist()

    findings, values = _probe(body)
    assert values == [1.5, 2.5]
    assert findings == []
    assert (torch.tensor, torch.as_tensor, torch.asarray, torch.from_numpy, torch.Tensor.new_tensor,
            torch.Tensor.tolist, torch.Tensor.numpy) == originals
    assert "tolist" not in vars(torch.Tensor)
