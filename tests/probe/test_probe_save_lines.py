"""The probe's "saved for backward here" lines are the saves the failing backward really reads.

A GAN keeps two graphs through one discriminator: `D(real)` and `D(fake)` both save D's weights, and an
optimizer step hits both.  When the generator's backward then fails, it fails reading `D(fake)`'s saves;
`D(real)`'s graph is never reached, so pointing there sends the reader to the wrong forward.

torch is the oracle: the fixture runs again under saved-tensor hooks that record, for every saved tensor, the
fixture line that saved it; the unpack hook sees which saved tensors a backward reads, and which of them changed
version since they were saved.  (The hooks switch torch's own version check off, so every backward completes;
the first backward that reads a changed tensor is the one that raises without them.)
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings

import pytest

from fixture_corpus import Fixture, all_fixtures

torch = pytest.importorskip("torch")

SAVED_RAISE = [fx for fx in all_fixtures()
               if fx.positive and fx.expected_raise and "modified by an inplace operation" in fx.expected_raise]
# Fixtures whose probe notes name a save the failing backward did not read, by why (strict: once the probe names only
# what torch read, the entry fails the test; delete it then).
NAMES_MORE_SAVES: dict[str, str] = {
    "GG001/pos_function_backward_squares_saved_tanh_output": (
        "the write is in a custom Function's backward, which unpacked its own `ctx.save_for_backward` save before "
        "writing; the probe still lists that save beside the upstream op's, which is the one torch fails on"),
    "GG001/pos_function_backward_writes_saved_sigmoid_output": (
        "the write is in a custom Function's backward, which unpacked its own `ctx.save_for_backward` save before "
        "writing; the probe still lists that save beside the upstream op's, which is the one torch fails on"),
}


def _lines_read_by_failing_backward(fx: Fixture) -> set[int]:
    """Fixture lines of the changed saved tensors the first backward reads (empty if none does)."""
    folder = os.path.realpath(fx.path.parent)

    function_apply = torch.autograd.function.Function.apply.__func__.__code__
    function_saves: dict = {}  # custom Function class -> the fixture line of its ctx.save_for_backward call
    save_for_backward = torch.autograd.function.FunctionCtx.save_for_backward

    def saving(ctx, *tensors):
        caller = sys._getframe(1)
        if os.path.dirname(os.path.realpath(caller.f_code.co_filename)) == folder:
            function_saves[getattr(ctx, "_forward_cls", None)] = caller.f_lineno
        return save_for_backward(ctx, *tensors)

    def user_line() -> int | None:
        frame = sys._getframe(2)
        if frame.f_code is function_apply and frame.f_locals.get("cls") in function_saves:
            # A custom Function's saves are packed after its forward returned: its save_for_backward line.
            return function_saves[frame.f_locals["cls"]]
        while frame is not None:
            if os.path.dirname(os.path.realpath(frame.f_code.co_filename)) == folder:
                return frame.f_lineno
            frame = frame.f_back
        return None

    current: set[int] | None = None
    first: set[int] = set()

    def pack(t):
        return t, t._version, user_line()

    def unpack(packed):
        t, version, line = packed
        if current is not None and t._version != version and line is not None:
            current.add(line)
        return t

    engine = torch.autograd._engine_run_backward

    def backward(*args, **kwargs):
        nonlocal current
        current = set()
        try:
            return engine(*args, **kwargs)
        finally:
            if current and not first:
                first.update(current)
            current = None

    spec = importlib.util.spec_from_file_location(f"save_lines_{fx.path.parent.name}_{fx.path.stem}", fx.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.autograd._engine_run_backward = backward
    torch.autograd.function.FunctionCtx.save_for_backward = saving
    try:
        with warnings.catch_warnings(), torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            warnings.simplefilter("ignore")
            try:
                module.run()
            except Exception:  # noqa: BLE001 - the run may go wrong later in other ways; only `first` matters
                pass
    finally:
        torch.autograd._engine_run_backward = engine
        torch.autograd.function.FunctionCtx.save_for_backward = save_for_backward
    return first


def _probe_save_lines(result, fx: Fixture) -> list[list[int]]:
    """For each finding the probe saw raise: the fixture lines of its "saved for backward here" notes."""
    here = os.path.realpath(fx.path)
    out = []
    for finding in result.findings:
        if finding.kind != "raised":
            continue
        lines = [n.site.line for n in finding.notes
                 if n.message.startswith("saved for backward here") and os.path.realpath(n.site.path) == here]
        if lines:
            out.append(lines)
    return out


@pytest.mark.parametrize("fx", SAVED_RAISE, ids=lambda f: f.id)
def test_saved_here_notes_are_what_the_failing_backward_reads(fx: Fixture, probe):
    read = _lines_read_by_failing_backward(fx)
    assert read, "torch's failing backward read no changed saved tensor"
    result = probe(fx.path, entry="run")
    reported = _probe_save_lines(result, fx)
    assert reported, [(f.code, f.kind, f.message) for f in result.findings]
    extra = [lines for lines in reported if not set(lines) <= read]
    if fx.id in NAMES_MORE_SAVES:
        assert extra, f"the probe names only what the failing backward reads now: delete {fx.id} from NAMES_MORE_SAVES"
        assert all(set(lines) & read for lines in reported), (reported, sorted(read))
        return
    for lines in reported:
        assert set(lines) <= read, f"the probe points at lines {lines}; the failing backward reads saves of {sorted(read)}"


def test_gan_two_graphs_point_at_d_fake():
    """The case of the issue, spelled out: `d_real = D(real)` (line 23) is not read by `loss_G.backward()`."""
    fx = next(f for f in SAVED_RAISE if f.id == "GG101/pos_gan_no_detach_shared_d_output")
    assert _lines_read_by_failing_backward(fx) == {24}
