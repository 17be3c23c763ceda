"""``gradguard.watch()`` (server/gradguard/watching.py) around a training step, in process, with real torch: as a
context manager and as a decorator, raising (the default) or warning at the first hidden write, naming the line
that wrote and the line that saved the tensor."""

from __future__ import annotations

import inspect
import os
import re
import traceback
import warnings

import pytest

torch = pytest.importorskip("torch")

import gradguard  # noqa: E402

HERE = os.path.basename(__file__)


def line_of(marker: str) -> int:
    """The line of this file that ends with ``# <marker>``."""
    lines = inspect.getsource(inspect.getmodule(line_of)).splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith(f"# {marker}"))


def step(x):
    h = torch.sigmoid(x)  # save
    h.data.clamp_(max=0.6)  # write
    h.sum().backward()  # backward
    return x.grad


def clean_step(model, opt, x):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    return loss.item()


def names_both_lines(text: str) -> None:
    assert re.search(rf"{re.escape(HERE)}:{line_of('write')}\s+writes here:\s+h\.data\.clamp_\(max=0\.6\)", text), text
    assert re.search(rf"{re.escape(HERE)}:{line_of('save')}\s+saved for backward here by `torch\.sigmoid\(x\)`", text), text
    assert ".venv" not in text and "bin/pytest" not in text  # the running Python's files are never the user's
    assert "GG102" in text and "fix: " in text


def test_context_manager_raises_at_the_backward_that_reads_the_write() -> None:
    x = torch.randn(6, requires_grad=True)
    with pytest.raises(gradguard.HiddenWriteError) as caught:
        with gradguard.watch():
            step(x)
    names_both_lines(str(caught.value))
    assert [f.code for f in caught.value.findings] == ["GG102"]
    # Raised right after the backward() that silently read the new values, not at the end of the block.
    frames = [(os.path.basename(f.filename), f.lineno) for f in traceback.extract_tb(caught.value.__traceback__)]
    assert (HERE, line_of("backward")) in frames


def test_decorator_raises() -> None:
    @gradguard.watch()
    def train_step(x):
        return step(x)

    with pytest.raises(gradguard.HiddenWriteError) as caught:
        train_step(torch.randn(6, requires_grad=True))
    names_both_lines(str(caught.value))
    with pytest.raises(gradguard.HiddenWriteError):  # every call is watched, and raises again
        train_step(torch.randn(6, requires_grad=True))


def test_warn_mode_context_manager_warns_once_per_line() -> None:
    watcher = gradguard.watch(mode="warn")
    x = torch.randn(6, requires_grad=True)
    with pytest.warns(gradguard.GradGuardWarning) as record:
        for _ in range(3):
            x.grad = None
            with watcher:
                grad = step(x)
    assert grad is not None  # the step ran to its end
    assert len(record) == 1
    assert record[0].filename == __file__ and record[0].lineno == line_of("write")
    names_both_lines(str(record[0].message))


def test_warn_mode_decorator() -> None:
    @gradguard.watch(mode="warn")
    def train_step(x):
        return step(x)

    with pytest.warns(gradguard.GradGuardWarning) as record:
        train_step(torch.randn(6, requires_grad=True))
    assert len(record) == 1
    names_both_lines(str(record[0].message))


def test_torchs_own_error_is_kept_and_explained() -> None:
    x = torch.randn(6, requires_grad=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as caught:
        with gradguard.watch():
            y = torch.exp(x)  # exp saves
            y.mul_(2)  # exp write
            y.sum().backward()
    assert type(caught.value) is RuntimeError
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert re.search(rf"{re.escape(HERE)}:{line_of('exp write')}\s+writes here:\s+y\.mul_\(2\)", notes), notes
    assert re.search(rf"{re.escape(HERE)}:{line_of('exp saves')}\s+saved for backward here by `torch\.exp\(x\)`", notes), notes
    assert [f.code for f in caught.value.gradguard_findings] == ["GG001"]


def test_a_clean_training_step_is_silent() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(inplace=True), torch.nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    watched = gradguard.watch()(clean_step)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(5):
            watched(model, opt, torch.randn(32, 8))
        with gradguard.watch(mode="warn"):
            clean_step(model, opt, torch.randn(32, 8))


def test_bad_mode() -> None:
    with pytest.raises(ValueError, match="mode"):
        gradguard.watch(mode="loud")


def test_every_rule_the_probe_reports_has_a_fix_line() -> None:
    from gradguard.watching import rule_doc

    for code in ("GG001", "GG002", "GG003", "GG004", "GG005", "GG101", "GG102", "GG103", "GG105", "GG106", "GG107",
                 "GG108", "GG109"):
        name, fix = rule_doc(code)
        assert name and fix and not fix.endswith(":"), code
        assert "The message" not in fix, code  # the fix itself, not how the static message words it
