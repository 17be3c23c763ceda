"""What ``pytest --gradguard`` costs on a small, realistic test suite (issue 31: at most 1.5x a plain run).

Writes a throwaway project whose tests train small models for some steps (an MLP classifier, a CNN with
BatchNorm, a GRU, a tiny transformer block, a hand-written SGD loop, plus two tests with no autograd at all), then
runs ``pytest`` on it, alternating plain and ``--gradguard`` runs in fresh processes, and prints the medians of:

- wall: the whole ``pytest`` command as a user waits for it (start-up and torch's import included);
- tests: the tests' own calls, summed over tests (what the tracer wraps; pytest's start-up excluded), as wall
  time and as CPU time (steadier on a busy machine: with one thread it is the work done).

One intra-op thread in both runs, so that the machine's other load disturbs the ratio less.  Prints numbers; it is
not a test.

    python bench/bench_plugin.py [--repeat N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = """
import time

import pytest
import torch

torch.set_num_threads(1)
CALLS = []


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: the tracer's own set-up and report are counted
def pytest_runtest_call(item):
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        return (yield)
    finally:
        CALLS.append((time.perf_counter() - wall, time.process_time() - cpu))


def pytest_terminal_summary(terminalreporter):
    wall, cpu = sum(w for w, _ in CALLS), sum(c for _, c in CALLS)
    terminalreporter.write_line(f"BENCH-CALLS {wall:.4f} {cpu:.4f} {len(CALLS)}")
"""

MODELS = """
import torch
from torch import nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(64, 128), nn.Linear(128, 64), nn.Linear(64, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x):
        return self.body(x)


class Block(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.ff(self.norm2(x))


def train(model, batches, steps, lr=1e-2, opt="adam"):
    optim = torch.optim.Adam(model.parameters(), lr=lr) if opt == "adam" else torch.optim.SGD(
        model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for step in range(steps):
        x, y = batches[step % len(batches)]
        optim.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optim.step()
        losses.append(loss.item())
    return losses
"""

TESTS = """
import math

import torch
from torch import nn

from models import CNN, MLP, Block, train


def batches(shape, n=4, classes=10):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(*shape, generator=g), torch.randint(0, classes, (shape[0],), generator=g)) for _ in range(n)]


def test_mlp_learns():
    torch.manual_seed(0)
    losses = train(MLP(), batches((64, 64)), steps=60)
    assert losses[-1] < losses[0]


def test_cnn_learns():
    torch.manual_seed(0)
    losses = train(CNN(), batches((16, 1, 16, 16)), steps=15, opt="sgd", lr=0.05)
    assert all(math.isfinite(v) for v in losses)


def test_gru_classifier():
    torch.manual_seed(0)
    gru, head = nn.GRU(8, 32, batch_first=True), nn.Linear(32, 10)
    model = nn.Module()
    model.gru, model.head = gru, head
    model.forward = lambda x: head(gru(x)[0][:, -1])
    losses = train(model, batches((16, 12, 8)), steps=15)
    assert all(math.isfinite(v) for v in losses)


def test_transformer_block():
    torch.manual_seed(0)
    block, head = Block(), nn.Linear(32, 10)
    model = nn.Sequential(block, nn.Flatten(1), nn.LazyLinear(10))
    x = torch.randn(8, 6, 32)
    model(x)
    losses = train(model, [(x, torch.randint(0, 10, (8,)))], steps=15)
    assert losses[-1] < losses[0] + 1


def test_manual_sgd():
    torch.manual_seed(0)
    w = torch.randn(32, 4, requires_grad=True)
    x, y = torch.randn(128, 32), torch.randn(128, 4)
    for _ in range(100):
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            w -= 0.05 * w.grad
            w.grad.zero_()
    assert loss.item() < 10


def test_gradcheck_of_a_small_function():
    x = torch.randn(5, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: torch.tanh(t) * t.sigmoid(), (x,))


def test_preprocessing_without_autograd():
    data = torch.randn(256, 16)
    normed = (data - data.mean(0)) / data.std(0)
    assert torch.allclose(normed.mean(0), torch.zeros(16), atol=1e-5)


def test_shapes():
    assert MLP()(torch.randn(3, 64)).shape == (3, 10)
    assert CNN()(torch.randn(2, 1, 16, 16)).shape == (2, 10)
"""


def write_project(folder: Path) -> None:
    (folder / "conftest.py").write_text(textwrap.dedent(CONFTEST), encoding="utf-8")
    (folder / "models.py").write_text(textwrap.dedent(MODELS), encoding="utf-8")
    (folder / "test_training.py").write_text(textwrap.dedent(TESTS), encoding="utf-8")


def run(folder: Path, traced: bool) -> tuple[float, float, float]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:asyncio",
               "-W", "ignore::DeprecationWarning", "--rootdir", str(folder), str(folder)]
    if traced:
        command.insert(3, "--gradguard")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    out = done.stdout + done.stderr
    calls = re.search(r"BENCH-CALLS ([\d.]+) ([\d.]+) (\d+)", out)
    if done.returncode != 0 or calls is None:
        raise SystemExit(f"pytest {'--gradguard ' if traced else ''}failed on the bench project:\n{out}")
    if traced and "no hidden autograd mutation in 8 traced tests" not in out:
        raise SystemExit(f"the clean bench project has findings under --gradguard:\n{out}")
    return wall, float(calls.group(1)), float(calls.group(2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each kind (default 5)")
    parser.add_argument("--keep", type=Path, help="write the project here and keep it")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        write_project(folder)
        run(folder, False)  # warm the file cache: torch's import
        times: dict[tuple[str, bool], list[float]] = {}
        for _ in range(args.repeat):
            for traced in (False, True):
                for name, value in zip(("wall", "calls", "cpu"), run(folder, traced)):
                    times.setdefault((name, traced), []).append(value)
    print(f"pytest --gradguard on 8 tests training small models (median of {args.repeat} alternating runs, "
          f"1 intra-op thread)")
    print(f"  {'':<32}{'plain':>10}{'--gradguard':>14}{'ratio':>9}")
    for name, label in (("wall", "wall (the whole command)"), ("calls", "tests (summed call wall time)"),
                        ("cpu", "tests (summed call CPU time)")):
        plain, traced = statistics.median(times[name, False]), statistics.median(times[name, True])
        print(f"  {label:<32}{plain:>9.2f}s{traced:>13.2f}s{traced / plain:>8.2f}x")
    print("  goal: <= 1.50x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
