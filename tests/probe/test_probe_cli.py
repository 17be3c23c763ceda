"""`gradguard probe` and `gradguard check --probe` end to end (each starts its own worker)."""

from __future__ import annotations

import json
import textwrap

import jsonschema
import pytest

from gradguard.cli import main

SAVED = """\
import torch


def run():
    x = torch.randn(4, 3, requires_grad=True)
    gate = torch.sigmoid(x)
    gate *= 0.5
    gate.sum().backward()
    return [x.grad]
"""

# Every way a static finding can come out of the merge, in one file.
MIXED = """\
import torch
import torch.nn as nn


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        s = torch.sigmoid(self.fc(x))
        s.mul_(2)
        return s


def run():
    gate = Gate()
    with torch.no_grad():
        gate(torch.randn(2, 3))
    x = torch.randn(3, requires_grad=True)
    y = torch.sigmoid(x)
    y.mul_(2)
    z = torch.exp(x)
    getattr(z, "add_")(1)
    if x.sum() > 100:
        w = torch.tanh(x)
        w.mul_(3)
        w.sum().backward()
    (y.sum() + z.sum()).backward()
"""

# The version-1 JSON schema of `check`, with the probe's keys allowed on each diagnostic.
DIAGNOSTIC = {
    "type": "object",
    "required": ["path", "line", "column", "end_line", "end_column", "code", "severity", "message", "related",
                 "fix"],
    "properties": {
        "line": {"type": "integer", "minimum": 1},
        "column": {"type": "integer", "minimum": 1},
        "severity": {"enum": ["error", "warning", "info"]},
        "related": {"type": "array", "items": {
            "type": "object", "required": ["path", "line", "column", "message"], "additionalProperties": False,
            "properties": {"path": {"type": "string"}, "line": {"type": "integer"}, "column": {"type": "integer"},
                           "message": {"type": "string"}}}},
        "confirmed": {"type": "boolean"},
        "device": {"type": ["string", "null"]},
        "torch_message": {"type": ["string", "null"]},
    },
}


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def write(name: str, source: str) -> str:
        (tmp_path / name).write_text(textwrap.dedent(source), encoding="utf-8")
        return name

    return write


def test_probe_json(project, capsys):
    path = project("gate.py", SAVED)
    assert main(["probe", f"{path}::run", "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["version"] == 1
    [d] = data["diagnostics"]
    jsonschema.validate(d, DIAGNOSTIC)
    assert (d["path"], d["line"], d["code"], d["severity"], d["confirmed"], d["device"]) == (
        "gate.py", 7, "GG001", "error", True, "cpu")
    assert d["torch_message"].startswith(
        "one of the variables needed for gradient computation has been modified by an inplace operation: "
        "[torch.FloatTensor [4, 3]], which is output 0 of Sigmoid, is at version 1; expected version 0 instead.")
    assert [(r["line"], r["column"], r["message"].split(":")[0]) for r in d["related"]] == [
        (6, 12, "saved for backward here by `torch.sigmoid(x)`"), (8, 5, "backward() raises here")]
    assert data["probe"]["status"] == "raised" and data["probe"]["device"] == "cpu"
    assert data["probe"]["exception"]["finding"] is True


def test_probe_text_and_exit_codes(project, capsys):
    path = project("gate.py", SAVED)
    assert main(["probe", path, "--entry", "run"]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("gate.py:7:5: GG001 `gate *= 0.5` modifies in place a tensor saved for backward by "
                          "`torch.sigmoid(x)`")
    assert "\n    gate.py:6:12: note: saved for backward here by `torch.sigmoid(x)`\n" in out
    assert "\n    gate.py:8:5: note: backward() raises here: one of the variables needed" in out
    assert "probe: gate.py: raised:" in err and "probe: device cpu" in err

    clean = project("clean.py", "import torch\nprint(torch.ones(2).sum().item())\n")
    assert main(["probe", clean]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "completed" in err

    slow = project("slow.py", "import time\ntime.sleep(30)\n")
    assert main(["probe", slow, "--timeout", "1"]) == 2
    assert "timeout" in capsys.readouterr().err

    assert main(["probe", "missing.py"]) == 2
    assert "not a file: missing.py" in capsys.readouterr().err


def test_probe_cuda_without_a_gpu_fails_clearly(project, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: see docs/probe.md for the GPU run")
    path = project("gate.py", SAVED)
    assert main(["probe", path, "--device", "cuda"]) == 2
    assert "torch.cuda.is_available() is False" in capsys.readouterr().err


def test_check_probe_merges(project, capsys):
    path = project("mixed.py", MIXED)
    code = main(["check", "--no-jedi", "--probe", "--entry", "run", "--format", "json", path])
    captured = capsys.readouterr()
    assert code == 1
    found = {(d["line"], d["code"]): d for d in json.loads(captured.out)["diagnostics"]}
    for d in found.values():
        jsonschema.validate(d, DIAGNOSTIC)
    # line 12: static finding; the probe ran it under no_grad, so nothing was saved: unconfirmed, kept
    assert found[(12, "GG001")]["confirmed"] is False
    assert "not confirmed" in found[(12, "GG001")]["message"]
    # line 22: static finding confirmed, raised to error
    assert found[(22, "GG001")]["confirmed"] is True and found[(22, "GG001")]["severity"] == "error"
    # line 24: only the probe sees `getattr(z, "add_")(1)`
    assert found[(24, "GG001")]["confirmed"] is True
    assert found[(24, "GG001")]["message"].endswith("(observed by the runtime probe)")
    # line 27: static finding in a branch the probe never took: unchanged
    assert "confirmed" not in found[(27, "GG001")]
    assert "probe: mixed.py: 1 confirmed, 1 added, 1 not confirmed" in captured.err


def test_check_probe_fixes_a_finding_in_the_module_the_entry_imports(project, capsys):
    """A probe-only finding the run of an entry file places in another module of the package (here: the optimizer
    made, in a helper module, before a call that replaces the model's layers) gets its fix there: fixes are attached
    after each finding has joined its own file's result (bench/realworld 308)."""
    import os

    os.makedirs("pkg", exist_ok=True)
    project("pkg/__init__.py", "")
    project("pkg/train.py", """\
        import torch
        import torch.nn as nn


        def widen(model):
            model[0] = nn.Linear(3, 8)
            model[2] = nn.Linear(8, 1)


        def fit(model):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            widen(model)
            opt.zero_grad()
            model(torch.randn(4, 3)).pow(2).mean().backward()
            return [p.grad for group in opt.param_groups for p in group["params"]]
        """)
    project("pkg/main.py", """\
        import torch.nn as nn

        from .train import fit

        if __name__ == "__main__":
            print(fit(nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))))
        """)
    code = main(["check", "--no-jedi", "--no-cache", "--probe", "--format", "json", "pkg"])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    [d] = [d for d in json.loads(captured.out)["diagnostics"] if d["message"].endswith("(observed by the runtime probe)")]
    assert (d["path"], d["line"], d["code"]) == (os.path.join("pkg", "train.py"), 11, "GG103")
    assert d["fix"] is not None and d["fix"]["title"].startswith("Build `opt` after the replacement"), d["fix"]
