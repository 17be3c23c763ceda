"""``pytest --gradguard`` (server/gradguard/pytest_plugin.py, pytest_tracing.py) on small projects run by pytest's
own ``pytester``, in process, with real torch: a passing test that hides a silent ``.data`` write fails (or, with
``--gradguard=warn``, passes with a warning naming the line); a test that raises torch's error keeps it, and the
report names the line that wrote, which torch's message does not; a clean project has no finding (the overhead is
printed)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("torch")

pytest_plugins = ["pytester"]

# The model's helper writes through `.data` into the output of sigmoid, which sigmoid saved for its backward:
# backward() then silently uses the clamped values.  The test passes without the plugin.
MODEL = """\
import torch


def squash(x):
    h = torch.sigmoid(x)
    h.data.clamp_(max=0.6)
    return h
"""
MODEL_WRITE, MODEL_SAVE = 6, 5

SILENT_TESTS = """\
import torch

from model import squash


def test_squash_has_gradients():
    x = torch.randn(8, requires_grad=True)
    y = squash(x)
    y.sum().backward()
    assert x.grad is not None


def test_plain():
    x = torch.randn(8, requires_grad=True)
    torch.tanh(x).sum().backward()
    assert x.grad is not None
"""

RAISING_TESTS = """\
import pytest
import torch


def test_raises():
    x = torch.randn(8, requires_grad=True)
    y = torch.exp(x)
    y.mul_(2)
    y.sum().backward()


def test_expects_the_error():
    x = torch.randn(8, requires_grad=True)
    y = torch.exp(x)
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
"""
RAISING_SAVE, RAISING_WRITE, RAISING_BACKWARD = 7, 8, 9

# A clean little suite: a few tests training a small MLP and a small CNN for some steps.
CLEAN_TESTS = """\
import torch
from torch import nn


def train(model, x, y, steps=15):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return loss.item()


def test_mlp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(inplace=True), nn.Linear(32, 1))
    x, y = torch.randn(64, 16), torch.randn(64, 1)
    assert train(model, x, y) < 10


def test_mlp_with_dropout_and_layernorm():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Dropout(0.1), nn.Linear(32, 1))
    x, y = torch.randn(64, 16), torch.randn(64, 1)
    assert train(model, x, y) < 10


def test_cnn():
    torch.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(4 * 4 * 4, 1))
    x, y = torch.randn(16, 1, 8, 8), torch.randn(16, 1)
    assert train(model, x, y, steps=8) < 10


def test_no_grad_update_by_hand():
    w = torch.randn(4, requires_grad=True)
    for _ in range(5):
        loss = (w * 2).pow(2).sum()
        loss.backward()
        with torch.no_grad():
            w -= 0.1 * w.grad
            w.grad.zero_()
"""

QUIET = ("-p", "no:cacheprovider", "-p", "no:asyncio", "-W", "ignore::DeprecationWarning")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*QUIET, *args)


def errors(result: pytest.RunResult) -> list[str]:
    """The exception lines of a run's tracebacks (``E   RuntimeError: ...``), without the ``E`` and indent."""
    return [line[1:].strip() for line in result.stdout.lines if re.match(r"E\s+\w+(Error|Exception):", line)]


def silent_project(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(model=MODEL, test_squash=SILENT_TESTS)
    pytester.syspathinsert()


def test_without_the_flag_the_hidden_write_passes(pytester: pytest.Pytester) -> None:
    silent_project(pytester)
    result = run(pytester)
    result.assert_outcomes(passed=2)
    assert "hidden autograd mutation" not in result.stdout.str()


def test_a_passing_test_that_hides_a_data_write_fails(pytester: pytest.Pytester) -> None:
    silent_project(pytester)
    result = run(pytester, "--gradguard")
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    assert "FAILED test_squash.py::test_squash_has_gradients" in out
    # The writing line, the line that saved the tensor, the backward, and a fix.
    assert re.search(rf"model\.py:{MODEL_WRITE}\s+writes here:\s+h\.data\.clamp_\(max=0\.6\)", out), out
    assert re.search(rf"model\.py:{MODEL_SAVE}\s+saved for backward here by `torch\.sigmoid\(x\)`", out), out
    assert re.search(r"test_squash\.py:9\s+backward\(\) reads the changed tensor here", out), out
    assert "GG102" in out and "silently uses the new values" in out
    assert "fix: Do the write after the backward that needs the old value" in out
    assert "1 hidden autograd mutation in 1 of 2 traced tests" in out


def test_warn_mode_passes_it_with_a_warning_at_the_line(pytester: pytest.Pytester) -> None:
    silent_project(pytester)
    result = run(pytester, "--gradguard=warn")
    result.assert_outcomes(passed=2, warnings=1)
    out = result.stdout.str()
    assert re.search(rf"model\.py:{MODEL_WRITE}: GradGuardWarning: gradguard GG102", out), out
    assert re.search(rf"model\.py:{MODEL_SAVE}\s+saved for backward here", out), out


def test_warn_mode_is_an_error_under_W_error(pytester: pytest.Pytester) -> None:
    silent_project(pytester)
    run(pytester, "--gradguard=warn", "-W", "error::gradguard.GradGuardWarning").assert_outcomes(failed=1, passed=1)


def test_a_bare_flag_before_a_path_is_the_fail_mode(pytester: pytest.Pytester) -> None:
    silent_project(pytester)
    run(pytester, "--gradguard", "test_squash.py").assert_outcomes(failed=1, passed=1)
    result = run(pytester, "--gradguard", "fail", "test_squash.py")
    result.assert_outcomes(failed=1, passed=1)
    bad = run(pytester, "--gradguard=loud")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "--gradguard=loud: expected" in bad.stderr.str()


def test_the_marker_turns_it_off_for_one_test(pytester: pytest.Pytester) -> None:
    silent_project(pytester)
    pytester.makepyfile(test_squash=SILENT_TESTS.replace(
        "def test_squash_has_gradients", "import pytest\n\n\n@pytest.mark.no_gradguard\ndef test_squash_has_gradients"))
    run(pytester, "--gradguard", "--strict-markers").assert_outcomes(passed=2)


def test_skips_and_xfails_keep_their_outcome(pytester: pytest.Pytester) -> None:
    silent_project(pytester)
    pytester.makepyfile(test_outcomes="""
        import pytest
        import torch

        from model import squash


        def test_skipped_after_the_write():
            x = torch.randn(8, requires_grad=True)
            squash(x).sum().backward()
            pytest.skip("no GPU")


        @pytest.mark.xfail(reason="known", strict=True)
        def test_expected_to_fail():
            assert False
    """)
    run(pytester, "--gradguard", "test_outcomes.py").assert_outcomes(skipped=1, xfailed=1)


def test_roots_name_the_users_code(pytester: pytest.Pytester) -> None:
    """With `--gradguard-root tests`, the model's file is not the user's: the finding is reported at the test's line
    that called into it."""
    pytester.mkdir("lib")
    pytester.mkdir("tests")
    (pytester.path / "lib" / "model.py").write_text(MODEL, encoding="utf-8")
    (pytester.path / "tests" / "test_squash.py").write_text(SILENT_TESTS, encoding="utf-8")
    pytester.syspathinsert(pytester.path / "lib")
    result = run(pytester, "--gradguard", "--gradguard-root", "tests")
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    assert re.search(r"tests/test_squash\.py:8\s+writes here:\s+y = squash\(x\)", out), out
    assert "model.py:" not in out


def test_a_raising_test_keeps_torchs_error_and_gets_the_writing_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_raising=RAISING_TESTS)
    plain = run(pytester)
    plain.assert_outcomes(failed=1, passed=1)
    plain_error = errors(plain)[0]

    result = run(pytester, "--gradguard")
    # test_raises fails with torch's own error; test_expects_the_error still passes (torch's check did its job).
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    assert plain_error in errors(result), "the test must fail with the very error torch raises"
    assert "FAILED test_raising.py::test_raises - RuntimeError: one of the variables need" in out
    assert f"line {RAISING_WRITE}" not in plain_error  # torch does not say which line wrote ...
    # ... the report does: the writing line, the saving line, the backward.
    assert re.search(rf"test_raising\.py:{RAISING_WRITE}\s+writes here:\s+y\.mul_\(2\)", out), out
    assert re.search(rf"test_raising\.py:{RAISING_SAVE}\s+saved for backward here by `torch\.exp\(x\)`", out), out
    assert re.search(rf"test_raising\.py:{RAISING_BACKWARD}\s+backward\(\) raises here", out), out
    assert "GG001" in out and "fix: Write out of place" in out
    # The traceback ends at torch, as without the plugin: not inside gradguard's tracer.
    assert "gradguard/probe/tracer.py" not in out

    # warn mode never turns a failure into a pass.
    run(pytester, "--gradguard=warn").assert_outcomes(failed=1, passed=1)


TIMING = """
import time

import pytest

CALLS = []


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: the tracer's own set-up and report are counted
def pytest_runtest_call(item):
    start = time.process_time()
    try:
        return (yield)
    finally:
        CALLS.append(time.process_time() - start)


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"CALLS-CPU {sum(CALLS):.4f}")
"""


def test_a_clean_project_has_no_finding_and_the_overhead_is_printed(pytester: pytest.Pytester, capsys) -> None:
    pytester.makepyfile(test_train=CLEAN_TESTS)
    pytester.makeconftest(TIMING)
    run(pytester).assert_outcomes(passed=4)  # warm up: torch's first calls
    wall: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    for traced in (False, True) * 3:
        start = time.perf_counter()
        result = run(pytester, *(("--gradguard",) if traced else ()))
        wall[traced].append(time.perf_counter() - start)
        result.assert_outcomes(passed=4)
        cpu[traced].append(float(re.search(r"CALLS-CPU ([\d.]+)", result.stdout.str()).group(1)))
        if traced:
            assert "no hidden autograd mutation in 4 traced tests" in result.stdout.str()
    w0, w1, c0, c1 = min(wall[False]), min(wall[True]), min(cpu[False]), min(cpu[True])
    with capsys.disabled():
        print(f"\n[pytest --gradguard overhead] clean project of 4 small training tests, in process, best of 3: "
              f"whole run {w0:.2f} s plain, {w1:.2f} s traced ({w1 / w0:.2f}x); the tests' CPU time {c0:.2f} s plain, "
              f"{c1:.2f} s traced ({c1 / c0:.2f}x)")


def test_without_the_flag_pytest_never_imports_torch(pytester: pytest.Pytester) -> None:
    """The entry point loads the plugin in every pytest run of every project: without --gradguard it must cost
    nothing, and never import torch (run in a fresh process, where torch is not imported yet)."""
    pytester.makeconftest("""
        import sys

        def pytest_sessionfinish(session):
            assert "gradguard.pytest_plugin" in sys.modules, "the pytest11 entry point is not installed"
            assert "torch" not in sys.modules, "pytest without --gradguard imported torch"
    """)
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess(*QUIET)
    result.assert_outcomes(passed=1)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_import_gradguard_does_not_import_torch() -> None:
    code = textwrap.dedent("""
        import sys
        import gradguard
        assert "torch" not in sys.modules
        assert "watch" in dir(gradguard)
        gradguard.watch
        assert "torch" in sys.modules
    """)
    subprocess.run([sys.executable, "-c", code], check=True)
