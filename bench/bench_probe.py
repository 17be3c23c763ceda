"""What the runtime probe costs.

1. Tracing overhead: each workload's training steps timed in this process (CPU time, one intra-op
   thread), untraced, under an empty TorchDispatchMode (the floor of this design), under the probe's
   tracer, and under ``torch.autograd.set_detect_anomaly(True)`` (the anchor: what users do today to
   find the op).  Median of alternating repetitions after a warm-up; the goal is <= 1.3x.
2. Warm-worker latency: a small script probed by an already started worker.  Latency is the wall
   time the caller waits minus the script's own run (untraced, in the same kind of fresh forked
   child); the goal is <= 100 ms.
3. Cold start: ``gradguard probe`` on that script from scratch (starts a worker, imports torch).

    python bench/bench_probe.py [--repeat N] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from gradguard.probe import ProbeOptions, ProbeWorker  # noqa: E402
from gradguard.probe.tracer import Tracer, UserCode  # noqa: E402

# Each defines setup() -> state and step(state), one training step.  Sizes are small-to-medium CPU
# workloads, the kind a probe would run on a laptop.
WORKLOADS = {
    "mlp (784-512-256-10, batch 128, Adam)": """
        import torch, torch.nn as nn, torch.nn.functional as F
        def setup():
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
            return model, torch.optim.Adam(model.parameters()), torch.randn(128, 784), torch.randint(0, 10, (128,))
        def step(state):
            model, opt, x, y = state
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
    """,
    "cnn (3 conv + BN, 32x32, batch 32, SGD)": """
        import torch, torch.nn as nn, torch.nn.functional as F
        def setup():
            torch.manual_seed(0)
            model = nn.Sequential(
                nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            return model, opt, torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
        def step(state):
            model, opt, x, y = state
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
    """,
    "transformer (2 layers, d=128, seq 64, batch 8, AdamW)": """
        import torch, torch.nn as nn
        def setup():
            torch.manual_seed(0)
            layer = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.1, batch_first=True)
            model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            return model, torch.optim.AdamW(model.parameters()), torch.randn(8, 64, 128)
        def step(state):
            model, opt, x = state
            loss = model(x).pow(2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
    """,
    "gru loop (GRUCell 64, 32 steps, batch 16; small ops)": """
        import torch, torch.nn as nn, torch.nn.functional as F
        def setup():
            torch.manual_seed(0)
            cell, head = nn.GRUCell(32, 64), nn.Linear(64, 1)
            opt = torch.optim.Adam(list(cell.parameters()) + list(head.parameters()))
            return cell, head, opt, torch.randn(32, 16, 32), torch.randn(32, 16, 1)
        def step(state):
            cell, head, opt, xs, ys = state
            h = torch.zeros(16, 64)
            loss = 0.0
            for t in range(32):
                h = cell(xs[t], h)
                loss = loss + F.mse_loss(head(h), ys[t])
            opt.zero_grad(); loss.backward(); opt.step()
    """,
    "tiny ops (worst case: 8x8 tensors, 200 ops/step)": """
        import torch
        def setup():
            torch.manual_seed(0)
            return torch.randn(8, 8, requires_grad=True), torch.randn(8, 8)
        def step(state):
            w, x = state
            h = x
            for _ in range(50):
                h = torch.tanh(h @ w) * 0.5 + x
            h.sum().backward()
            w.grad = None
    """,
    "tiny ops + loss.item() each step (read tracking)": """
        import torch
        def setup():
            torch.manual_seed(0)
            return torch.randn(8, 8, requires_grad=True), torch.randn(8, 8), []
        def step(state):
            w, x, log = state
            h = x
            for _ in range(50):
                h = torch.tanh(h @ w) * 0.5 + x
            loss = h.sum()
            log.append(loss.item())
            loss.backward()
            w.grad = None
    """,
}

SMALL_SCRIPT = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    loss = F.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 2, (8,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


class _Empty(TorchDispatchMode):
    """The floor: a dispatch mode that only forwards each op (what any TorchDispatchMode costs)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _load(name: str, source: str, folder: str):
    path = os.path.join(folder, f"workload_{abs(hash(name)) % 10**8}.py")
    Path(path).write_text(textwrap.dedent(source))
    namespace = {"__name__": "workload"}
    exec(compile(Path(path).read_text(), path, "exec"), namespace)
    return namespace


def _time(step, state, steps: int) -> float:
    """CPU seconds per step (all threads of this process): robust to other load on the machine."""
    start = time.process_time()
    for _ in range(steps):
        step(state)
    return (time.process_time() - start) / steps


def overhead(repeat: int, steps: int, workloads: int = 0) -> dict:
    print(f"1. Tracing overhead: CPU time per training step, median of {repeat} alternating runs of {steps} steps "
          f"(this process, {torch.get_num_threads()} intra-op threads)\n")
    print(f"   {'workload':<58} {'untraced':>9} {'empty mode':>10} {'probe':>9} {'ratio':>6} {'anomaly':>9} {'ratio':>6}")
    ratios = []
    rows: dict = {}
    with tempfile.TemporaryDirectory() as folder:
        user = UserCode([folder])
        for name, source in list(WORKLOADS.items())[: workloads or None]:
            ns = _load(name, source, folder)
            state = ns["setup"]()
            for _ in range(3):
                ns["step"](state)  # warm-up: first-call costs are not what we measure
            plain, empty, traced, anomaly = [], [], [], []
            tracer = Tracer(user)  # one per run, as in the probe (making one costs ~1 ms)
            for _ in range(repeat):
                plain.append(_time(ns["step"], state, steps))
                with _Empty():
                    empty.append(_time(ns["step"], state, steps))
                with tracer:
                    traced.append(_time(ns["step"], state, steps))
                with torch.autograd.set_detect_anomaly(True, check_nan=False):
                    anomaly.append(_time(ns["step"], state, steps))
            p, e, t, a = (statistics.median(v) for v in (plain, empty, traced, anomaly))
            ratios.append(t / p)
            rows[name] = {"untraced_ms": p * 1000, "probe_ratio": t / p, "anomaly_ratio": a / p, "empty_ratio": e / p}
            print(f"   {name:<58} {p * 1000:7.2f}ms {e / p:9.2f}x {t * 1000:7.2f}ms {t / p:5.2f}x "
                  f"{a * 1000:7.2f}ms {a / p:5.2f}x")
    real, small = ratios[:3], ratios[3:]
    g_real = statistics.geometric_mean(real)
    g_small = statistics.geometric_mean(small) if small else float("nan")
    print(f"\n   probe overhead, geometric mean: {g_real:.2f}x on the layer-sized steps "
          f"(of the first {len(real)} workloads), {g_small:.2f}x on the small-op-bound ones "
          f"(goal <= 1.3x).\n   The floor is torch's Python dispatch: an empty TorchDispatchMode costs most of the "
          f"latter on its own.\n")
    return {"workloads": rows, "geomean_layer": g_real, "geomean_small": g_small}


def latency(repeat: int) -> dict:
    print("2. Warm-worker latency for a small script (5 SGD steps of a 2-layer MLP)\n")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "small.py")
        Path(path).write_text(SMALL_SCRIPT)
        started = time.monotonic()
        with ProbeWorker() as worker:
            startup = time.monotonic() - started
            worker.probe(path)  # the first request pays page faults of the fresh worker
            plain, traced = [], []
            for _ in range(repeat):
                plain.append(worker.probe(path, ProbeOptions(trace=False)))
                probe = worker.probe(path)
                assert probe.status == "completed" and not probe.findings, probe.detail
                traced.append(probe)
            sandbox = worker.info.get("sandbox", {})

    def stats(values):
        return statistics.median(values) * 1000, min(values) * 1000

    p_wall, p_min = stats([r.seconds for r in plain])
    t_wall, t_min = stats([r.seconds for r in traced])
    w_wall, w_min = stats([r.total_seconds for r in traced])
    p_cpu, t_cpu = (statistics.median([r.cpu_seconds for r in rs]) * 1000 for rs in (plain, traced))
    print(f"   worker start (import torch + torch._dynamo, sandbox): {startup:.2f} s "
          f"(network namespace: {sandbox.get('network_namespace')}, read-only files: {sandbox.get('read_only_files')})")
    print(f"   {repeat} runs, each in a fresh forked child:      median    best   (CPU median)")
    print(f"   script untraced                         {p_wall:7.0f}ms {p_min:6.0f}ms   ({p_cpu:.0f} ms)")
    print(f"   script traced                           {t_wall:7.0f}ms {t_min:6.0f}ms   ({t_cpu:.0f} ms)")
    print(f"   caller waits for the traced result      {w_wall:7.0f}ms {w_min:6.0f}ms")
    print(f"   latency beyond the script's own run     {w_wall - p_wall:7.0f}ms {w_min - p_min:6.0f}ms   "
          f"(goal <= 100 ms; fork, sandbox and report alone: {w_wall - t_wall:.0f} ms)\n")
    return {"worker_start_s": startup, "latency_ms": w_wall - p_wall, "latency_best_ms": w_min - p_min}


def cold() -> dict:
    print("3. Cold start: `gradguard probe small.py` from scratch\n")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "small.py")
        Path(path).write_text(SMALL_SCRIPT)
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "gradguard", "probe", path], capture_output=True, text=True)
        took = time.monotonic() - start
    print(f"   {took:.2f} s wall (exit {done.returncode}); most of it is importing torch in the new worker\n")
    return {"cold_s": took, "exit": done.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--workloads", type=int, default=0, help="only the first N workloads (0: all)")
    parser.add_argument("--json", type=Path, help="also write the figures to FILE")
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads, here and in the probe worker (default 1: OpenMP threads spin on a "
                             "busy machine and make both CPU and wall time meaningless; more threads make the "
                             "untraced baseline faster, so the overhead ratios larger)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # the worker (and its children) inherit it
    if args.quick:
        args.repeat, args.steps = 3, 3
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n")
    result = {"overhead": overhead(args.repeat, args.steps, args.workloads), "latency": latency(max(args.repeat, 5)),
              "cold": cold()}
    if args.json:
        import json

        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
