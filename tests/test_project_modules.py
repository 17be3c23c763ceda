"""Calls followed into the project's other modules: relative imports in a package, a script's sibling modules,
and names a package's ``__init__.py`` re-exports.  Each program is a small package or script folder written
to a temporary directory and run under torch first, so every positive is known to break autograd and every
negative to run clean; then gradguard checks the entry file alone."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gradguard

torch = pytest.importorskip("torch")

SAVED = "one of the variables needed for gradient computation has been modified by an inplace operation"

MODEL = """
    import torch
    import torch.nn as nn


    class Critic(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(4, 8)
            self.out = nn.Linear(8, 1)

        def forward(self, x):
            return self.out(torch.tanh(self.body(x)))
"""

# A trainer in the entry module steps the critic's optimizer between the critic's forward and the second
# backward through it: the Linear layers of the imported model saved the weights the step changes.
TRAIN = """
    import torch

    from {import_from} import Critic


    def train():
        torch.manual_seed(0)
        critic = Critic()
        optimizer = torch.optim.SGD(critic.parameters(), lr=0.1)
        x = torch.randn(5, 4, requires_grad=True)
        value = critic(x).mean()
        optimizer.zero_grad()
        value.backward(retain_graph=True)
        optimizer.step()
        (value * 2).backward()


    if __name__ == "__main__":
        train()
"""

# The model's forward writes a tensor that its own tanh saved, in a module of its own; the entry file only
# builds and calls it: the finding is reported at that call, with the write in the other file.
INPLACE_MODEL = """
    import torch
    import torch.nn as nn


    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, x):
            h = torch.tanh(self.proj(x))
            h.mul_(0.5)
            return h
"""

CALLER = """
    import torch

    from {import_from} import Gate


    def step():
        torch.manual_seed(0)
        gate = Gate()
        gate(torch.randn(3, 4)).sum().backward()


    if __name__ == "__main__":
        step()
"""

CLEAN_TRAIN = """
    import torch

    from {import_from} import Critic


    def train():
        torch.manual_seed(0)
        critic = Critic()
        optimizer = torch.optim.SGD(critic.parameters(), lr=0.1)
        x = torch.randn(5, 4, requires_grad=True)
        value = critic(x).mean()
        optimizer.zero_grad()
        (value * 3).backward()
        optimizer.step()


    if __name__ == "__main__":
        train()
"""


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")


def _run(root: Path, entry: str) -> subprocess.CompletedProcess:
    """Run the program as Python would: a package module with ``-m`` from its root, a script by its path."""
    module = entry[:-3].replace("/", ".")
    args = [sys.executable, "-m", module] if "/" in entry else [sys.executable, entry]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=120, env=env)


def _check(root: Path, *entries: str) -> list[dict]:
    # The gradguard this test imports (a relative PYTHONPATH would not reach it from ``root``).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(gradguard.__file__).parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "gradguard", "check", "--no-cache", "--format", "json", *entries],
                          cwd=root, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)["diagnostics"]


def _where(d: dict) -> tuple[str, int]:
    return Path(d["path"]).as_posix(), d["line"]


LAYOUTS = {
    # name: (files, entry, what the entry imports from)
    "relative import in a package": ({"pkg/__init__.py": "", "pkg/model.py": MODEL}, "pkg/main.py", ".model"),
    "script beside its module": ({"model.py": MODEL}, "main.py", "model"),
    "re-exported by a subpackage": ({"pkg/__init__.py": "", "pkg/nets/__init__.py": "from .critic import Critic\n",
                                     "pkg/nets/critic.py": MODEL}, "pkg/main.py", ".nets"),
    "absolute import of the package": ({"pkg/__init__.py": "", "pkg/model.py": MODEL}, "pkg/main.py", "pkg.model"),
}


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_a_step_between_a_forward_and_its_backward_through_an_imported_model(tmp_path: Path, layout: str):
    files, entry, import_from = LAYOUTS[layout]
    _write(tmp_path, {**files, entry: TRAIN.format(import_from=import_from)})
    ran = _run(tmp_path, entry)
    assert ran.returncode != 0 and SAVED in ran.stderr, ran.stderr[-2000:]

    found = _check(tmp_path, entry)
    assert [(d["code"], d["line"]) for d in found] == [("GG101", 14)], found
    saved = found[0]["related"][0]
    assert Path(saved["path"]).name in ("model.py", "critic.py") and saved["line"] == 12, found
    assert " of model.py" in found[0]["message"] or " of critic.py" in found[0]["message"]


@pytest.mark.parametrize("layout", ["relative import in a package", "script beside its module"], ids=str)
def test_the_same_code_with_the_step_after_every_backward_is_clean(tmp_path: Path, layout: str):
    files, entry, import_from = LAYOUTS[layout]
    _write(tmp_path, {**files, entry: CLEAN_TRAIN.format(import_from=import_from)})
    ran = _run(tmp_path, entry)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert _check(tmp_path, entry) == []


def test_a_write_inside_an_imported_forward_is_reported_in_its_own_file_with_the_call_related(tmp_path: Path):
    files = {"pkg/__init__.py": "", "pkg/gate.py": INPLACE_MODEL, "pkg/main.py": CALLER.format(import_from=".gate")}
    _write(tmp_path, files)
    ran = _run(tmp_path, "pkg/main.py")
    assert ran.returncode != 0 and SAVED in ran.stderr, ran.stderr[-2000:]

    found = _check(tmp_path, "pkg/main.py")
    assert [(d["code"], *_where(d)) for d in found] == [("GG001", "pkg/gate.py", 12)], found
    assert ("pkg/main.py", 9) in {_where(r) for r in found[0]["related"]}  # the call that leads there
    # Its fix edits that file, where the write is (lines and columns of gate.py)
    assert found[0]["fix"]["title"] == "Write out of place: `h = h.mul(0.5)`", found[0]["fix"]
    assert [(e["line"], e["column"]) for e in found[0]["fix"]["edits"]] == [(12, 10)]


def _fix(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(gradguard.__file__).parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "gradguard", "check", "--no-cache", *args],
                          cwd=root, capture_output=True, text=True, timeout=300, env=env)


GRADS = """
    import torch

    from {import_from} import Gate


    torch.manual_seed(0)
    gate = Gate()
    gate(torch.randn(3, 4)).sum().backward()
    print(gate.proj.weight.grad.sum().item())
"""


@pytest.mark.parametrize("checked", [("pkg/main.py",), ("pkg",)], ids=["the entry file", "the package"])
def test_fix_writes_the_module_where_the_write_is(tmp_path: Path, checked: tuple[str, ...]):
    """``check --fix`` of the entry file (or of the package) fixes the write where it is reported, in gate.py,
    and leaves main.py alone; the fixed program runs and gives the gradients of the write made out of place."""
    files = {"pkg/__init__.py": "", "pkg/gate.py": INPLACE_MODEL, "pkg/main.py": CALLER.format(import_from=".gate")}
    _write(tmp_path, files)
    main = (tmp_path / "pkg/main.py").read_text()
    done = _fix(tmp_path, "--fix", *checked)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Fixed 1 problem in 1 file" in done.stderr, done.stderr
    gate = (tmp_path / "pkg/gate.py").read_text()
    assert "        h = h.mul(0.5)\n" in gate and "mul_" not in gate, gate
    assert (tmp_path / "pkg/main.py").read_text() == main
    assert _run(tmp_path, "pkg/main.py").returncode == 0
    assert _check(tmp_path, *checked) == []
    # the gradients the module's intended (out-of-place) arithmetic gives
    _write(tmp_path, {"pkg/grads.py": GRADS.format(import_from=".gate"),
                      "pkg/ref.py": INPLACE_MODEL.replace("h.mul_(0.5)", "h = h * 0.5"),
                      "pkg/ref_grads.py": GRADS.format(import_from=".ref")})
    fixed, reference = _run(tmp_path, "pkg/grads.py"), _run(tmp_path, "pkg/ref_grads.py")
    assert fixed.returncode == reference.returncode == 0 and fixed.stdout == reference.stdout, fixed.stderr


def test_fix_leaves_a_module_changed_since_it_was_read(tmp_path: Path, monkeypatch):
    """The module is re-read and fixed from the bytes written back only if they are still those bytes: one
    edited while fixing is left as it is (``write_if_unchanged``), as the analysed file would be."""
    from gradguard.autofix import writer

    files = {"pkg/__init__.py": "", "pkg/gate.py": INPLACE_MODEL, "pkg/main.py": CALLER.format(import_from=".gate")}
    _write(tmp_path, files)
    monkeypatch.chdir(tmp_path)
    gate = tmp_path / "pkg/gate.py"
    real = writer.write_if_unchanged

    def edited_meanwhile(path, expected, new):
        gate.write_text(gate.read_text() + "# edited\n")
        return real(path, expected, new)

    monkeypatch.setattr(writer, "write_if_unchanged", edited_meanwhile)
    outcome = writer.fix_path(gate, "pkg/gate.py", entries=[("pkg/main.py", tmp_path / "pkg/main.py")])
    assert outcome.write_failed and writer.CHANGED in outcome.problems[-1]
    assert gate.read_text() == textwrap.dedent(INPLACE_MODEL).lstrip() + "# edited\n"


@pytest.mark.parametrize("on_demand", [False, True], ids=["with fixes", "fixes on demand (the editor)"])
def test_the_checks_of_a_fix_in_another_module_reuse_the_entry_files_parse(tmp_path: Path, monkeypatch,
                                                                         on_demand: bool):
    """A fix made in the module where the write is checks each candidate by analysing the entry file with the
    candidate read for that module (``api._elsewhere``).  The entry file is parsed once, by the analysis, however
    many candidates are checked, and each check answers as a fresh parse would: the module's text still has the
    finding, the write made out of place removes it, and the module's text checked after that has it again."""
    from gradguard import api, parsing
    from gradguard.config import Config
    from gradguard.fixes.identity import FindingId

    files = {"pkg/__init__.py": "", "pkg/gate.py": INPLACE_MODEL, "pkg/main.py": CALLER.format(import_from=".gate")}
    _write(tmp_path, files)
    entry = tmp_path / "pkg/main.py"
    text = entry.read_text()
    parses, answers = [], []
    parse = parsing.parse_document
    monkeypatch.setattr(parsing, "parse_document", lambda t, *a, **k: (parses.append(t == text), parse(t, *a, **k))[1])
    build = api.FIX_BUILDERS["GG001"]

    def checking(ctx, finding):
        fixed = ctx.text.replace("h.mul_(0.5)", "h = h.mul(0.5)")
        answers.append([ctx.still_found(t, FindingId("GG001", 12)) for t in (ctx.text, fixed, ctx.text)])
        return build(ctx, finding)

    monkeypatch.setitem(api.FIX_BUILDERS, "GG001", checking)
    result = api.analyze_source(text, str(entry), Config(), own_file=not on_demand, fixes=not on_demand)
    diagnostics = result.fixes.fixed(result.diagnostics) if on_demand else result.diagnostics
    assert [d.fix.title for d in diagnostics] == ["Write out of place: `h = h.mul(0.5)`"]
    assert answers == [[True, False, True]]
    assert parses.count(True) == 1


def test_a_folder_named_like_torch_is_not_taken_for_torch(tmp_path: Path):
    """``torch.optim.SGD`` stays torch's optimizer even beside a folder ``torch/`` whose ``optim.py`` defines a
    class ``SGD`` that steps nothing: the libraries every file imports are never looked up in the project."""
    fake = "class SGD:\n    def __init__(self, params, lr):\n        pass\n\n    def step(self):\n        pass\n"
    _write(tmp_path, {"torch/__init__.py": "", "torch/optim.py": fake, "main.py": TRAIN.format(import_from="model"),
                      "model.py": MODEL})
    found = _check(tmp_path, "main.py")
    assert [(d["code"], d["line"]) for d in found] == [("GG101", 14)]
    assert all("torch" not in Path(r["path"]).parts for d in found for r in d["related"])


def test_a_batch_forgets_the_modules_its_last_files_did_not_read_and_reads_them_again(tmp_path: Path):
    """``batch.analyze_chunk(..., alone=True)`` drops a project module no file read in its last
    ``FORGET_AFTER_FILES`` files (with its nodes' marks as another file's); a later file that imports it reads it
    again and gets the same findings, the other file still named in the message."""
    from gradguard import batch, messages
    from gradguard.config import Config
    from gradguard.inference import project

    files, entry, import_from = LAYOUTS["relative import in a package"]
    others = {f"pkg/other_{i}.py": "import torch\n\nx = torch.zeros(3)\nx.add_(1)\n"
              for i in range(project.FORGET_AFTER_FILES + 1)}
    _write(tmp_path, {**files, entry: TRAIN.format(import_from=import_from), **others})
    model = (tmp_path / "pkg" / "model.py").resolve()
    pair = (str(tmp_path / entry),) * 2  # the display name is the path the analysis resolves imports from

    first, crashes, _ = batch.analyze_chunk([pair], Config(), alone=True)
    assert not crashes and model in project._PARSED
    tree = project._PARSED[model][1].tree
    assert any(messages.other_file(node) == str(model) for node in ast.walk(tree))
    batch.analyze_chunk([(str(tmp_path / name),) * 2 for name in others], Config(), alone=True)
    assert model not in project._PARSED
    assert not any(messages.other_file(node) for node in ast.walk(tree))

    again, crashes, _ = batch.analyze_chunk([pair], Config(), alone=True)
    assert not crashes and model in project._PARSED
    assert [d.code for d in first[0].diagnostics] == ["GG101"]
    assert again[0].diagnostics == first[0].diagnostics and " of model.py" in again[0].diagnostics[0].message


# A layer whose base class lives in another module of the project (``class Gate(GatedBase)`` with ``from .base
# import GatedBase``): its constructor and forward are the base's, found through the import.
GATED_BASE = """
    import torch
    import torch.nn as nn


    class GatedBase(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.proj = nn.Linear(width, width)

        def forward(self, x):
            h = torch.sigmoid(self.proj(x))
            {scale}
            return h
"""
IN_PLACE_SCALE, OUT_OF_PLACE_SCALE = "h.mul_(0.5)", "h = h * 0.5"

GATE = """
    import torch
    {import_base}


    class Gate({base}):
        def __init__(self):
            super().__init__(4)
"""

# The subclass's own forward comes first in its MRO: the base's forward (which would write in place) never runs.
OWN_FORWARD_GATE = GATE + """
        def forward(self, x):
            return torch.sigmoid(self.proj(x)) * 0.5
"""

BASE_LAYOUTS = {
    # name: (files besides the entry, entry, the base module's path)
    "base in a sibling module": (
        {"pkg/__init__.py": "", "pkg/base.py": "{base_module}",
         "pkg/gate.py": GATE.format(import_base="from .base import GatedBase", base="GatedBase")},
        "pkg/main.py", ".gate", "pkg/base.py"),
    "base re-exported by a subpackage, through a middle class": (
        {"pkg/__init__.py": "", "pkg/layers/__init__.py": "from .base import GatedBase\n",
         "pkg/layers/base.py": "{base_module}",
         "pkg/layers/middle.py": "from .base import GatedBase\n\n\nclass Middle(GatedBase):\n    pass\n",
         "pkg/gate.py": GATE.format(import_base="from .layers.middle import Middle", base="Middle")},
        "pkg/main.py", ".gate", "pkg/layers/base.py"),
    "base named through its module": (
        {"pkg/__init__.py": "", "pkg/base.py": "{base_module}",
         "pkg/gate.py": GATE.format(import_base="from . import base", base="base.GatedBase")},
        "pkg/main.py", ".gate", "pkg/base.py"),
    "script folder, absolute imports": (
        {"base.py": "{base_module}", "gate.py": GATE.format(import_base="from base import GatedBase", base="GatedBase")},
        "main.py", "gate", "base.py"),
}


def _base_files(layout: str, scale: str, gate: str | None = None) -> tuple[dict[str, str], str, str]:
    files, entry, import_from, base_path = BASE_LAYOUTS[layout]
    files = {name: GATED_BASE.format(scale=scale) if text == "{base_module}" else text for name, text in files.items()}
    if gate is not None:
        files = {**files, gate: OWN_FORWARD_GATE.format(import_base="from .base import GatedBase",
                                                        base="GatedBase")}
    return {**files, entry: CALLER.format(import_from=import_from)}, entry, base_path


@pytest.mark.parametrize("layout", BASE_LAYOUTS, ids=str)
def test_a_write_in_the_forward_of_a_base_class_from_another_module(tmp_path: Path, layout: str):
    files, entry, base_path = _base_files(layout, IN_PLACE_SCALE)
    _write(tmp_path, files)
    ran = _run(tmp_path, entry)
    assert ran.returncode != 0 and SAVED in ran.stderr, ran.stderr[-2000:]

    found = _check(tmp_path, entry)
    assert [(d["code"], *_where(d)) for d in found] == [("GG001", base_path, 12)], found
    assert (entry, 9) in {_where(r) for r in found[0]["related"]}, found


@pytest.mark.parametrize("layout", ["base in a sibling module", "script folder, absolute imports"], ids=str)
def test_the_base_class_writing_out_of_place_is_clean(tmp_path: Path, layout: str):
    files, entry, _ = _base_files(layout, OUT_OF_PLACE_SCALE)
    _write(tmp_path, files)
    ran = _run(tmp_path, entry)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert _check(tmp_path, entry) == []


def test_a_subclass_forward_comes_before_its_imported_base_forward(tmp_path: Path):
    files, entry, _ = _base_files("base in a sibling module", IN_PLACE_SCALE, gate="pkg/gate.py")
    _write(tmp_path, files)
    ran = _run(tmp_path, entry)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert _check(tmp_path, entry) == []


# A model class of the entry file, built by its training code, holds a layer imported from the project whose
# cell, three calls down, updates a buffer that its own product saved.  From `main()` the write is deeper than
# the analysis inlines; the model's forward, analysed on its own, runs in training too, so it follows the call
# into the layer's module.
MEMORY_LAYER = """
    import torch
    import torch.nn as nn


    class Cell(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.register_buffer("state", torch.zeros(2, width))

        def forward(self, h):
            out = h * self.state
            self.remember(out)
            return out

        def remember(self, out):
            write_state(self, out.detach())


    def write_state(layer, out):
        {update}


    class Memory(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.proj = nn.Linear(width, width)
            self.cell = Cell(width)

        def forward(self, x):
            return self.cell(torch.tanh(self.proj(x)))
"""
IN_PLACE_UPDATE, REBOUND_UPDATE = "layer.state.copy_(out + 1)", "layer.state = out + 1"

MODEL_FIT = """
    import torch

    from {import_from} import Memory


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.memory = Memory(4)
            self.head = torch.nn.Linear(4, 1)

        def forward(self, x):
            return self.head(self.memory(x))


    def fit(model, batches):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in batches:
            optimizer.zero_grad()
            model(x).pow(2).mean().backward()
            optimizer.step()


    def main():
        torch.manual_seed(0)
        fit(Net(), [torch.randn(2, 4) for _ in range(2)])


    if __name__ == "__main__":
        main()
"""

MEMORY_LAYOUTS = {
    "relative import in a package": ({"pkg/__init__.py": "", "pkg/memory.py": "{layer}"}, "pkg/main.py", ".memory",
                                     "pkg/memory.py"),
    "script beside its module": ({"memory.py": "{layer}"}, "main.py", "memory", "memory.py"),
    "re-exported by a subpackage": ({"pkg/__init__.py": "", "pkg/layers/__init__.py": "from .memory import Memory\n",
                                    "pkg/layers/memory.py": "{layer}"}, "pkg/main.py", ".layers",
                                    "pkg/layers/memory.py"),
}


def _memory_files(layout: str, update: str) -> tuple[dict[str, str], str, str]:
    files, entry, import_from, layer_path = MEMORY_LAYOUTS[layout]
    files = {name: MEMORY_LAYER.format(update=update) if text == "{layer}" else text for name, text in files.items()}
    return {**files, entry: MODEL_FIT.format(import_from=import_from)}, entry, layer_path


@pytest.mark.parametrize("layout", MEMORY_LAYOUTS, ids=str)
def test_a_model_the_training_code_builds_follows_its_imported_layer(tmp_path: Path, layout: str):
    files, entry, layer_path = _memory_files(layout, IN_PLACE_UPDATE)
    _write(tmp_path, files)
    ran = _run(tmp_path, entry)
    assert ran.returncode != 0 and SAVED in ran.stderr, ran.stderr[-2000:]

    found = _check(tmp_path, entry)
    # The write, in a helper called once (part of its caller's code): changed where it is (to a rebinding).
    assert [(d["code"], *_where(d)) for d in found] == [("GG001", layer_path, 20)], found
    assert (entry, 13) in {_where(r) for r in found[0]["related"]}, found


@pytest.mark.parametrize("layout", ["relative import in a package", "script beside its module"], ids=str)
def test_the_imported_layer_rebinding_its_buffer_is_clean(tmp_path: Path, layout: str):
    files, entry, _ = _memory_files(layout, REBOUND_UPDATE)
    _write(tmp_path, files)
    ran = _run(tmp_path, entry)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert _check(tmp_path, entry) == []


# A framework's generic in-place helper (called from more than one place, and doing nothing but the write): the
# line to change is the call that hands it a saved tensor, not the helper (changing it changes every caller).
OPS = """
    def scale_(t, k):
        \"\"\"Scale ``t`` in place.\"\"\"
        t.mul_(k)
        return t


    def halve_(t):
        scale_(t, 0.5)
"""

GENERIC_LAYER = """
    import torch
    import torch.nn as nn

    from .ops import scale_


    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, x):
            h = torch.tanh(self.proj(x)){copy}
            scale_(h, 0.5)
            return h

        def rescale(self, buffer):
            scale_(buffer, 2.0)
"""

GENERIC_MAIN = """
    import torch

    from .layer import Gate
    from .ops import halve_


    def step():
        torch.manual_seed(0)
        gate = Gate()
        gate(torch.randn(3, 4)).sum().backward()
        h = torch.sigmoid(torch.randn(3, 4, requires_grad=True)){copy}
        halve_(h)
        h.sum().backward()


    if __name__ == "__main__":
        step()
"""


def _generic_files(copy: str) -> dict[str, str]:
    return {"pkg/__init__.py": "", "pkg/ops.py": OPS, "pkg/layer.py": GENERIC_LAYER.format(copy=copy),
            "pkg/main.py": GENERIC_MAIN.format(copy=copy)}


def test_a_write_in_a_generic_helper_is_reported_at_the_call_that_hands_it_the_saved_tensor(tmp_path: Path):
    _write(tmp_path, _generic_files(""))
    ran = _run(tmp_path, "pkg/main.py")
    assert ran.returncode != 0 and SAVED in ran.stderr, ran.stderr[-2000:]

    found = sorted(_check(tmp_path, "pkg/main.py"), key=_where)
    # In the layer's module: its call of `scale_`, which two places call.  From the entry file: `halve_`, called
    # once, is part of its caller's code: its own call of `scale_` is the line to change.
    assert [(d["code"], *_where(d)) for d in found] == [("GG001", "pkg/layer.py", 14), ("GG001", "pkg/ops.py", 8)]
    layer, halve = found
    assert {("pkg/ops.py", 3), ("pkg/main.py", 10)} <= {_where(r) for r in layer["related"]}, layer
    assert {("pkg/ops.py", 3), ("pkg/main.py", 12)} <= {_where(r) for r in halve["related"]}, halve
    assert layer["fix"] is None and halve["fix"] is None


def test_a_generic_helper_given_a_copy_is_clean(tmp_path: Path):
    _write(tmp_path, _generic_files(".clone()"))
    ran = _run(tmp_path, "pkg/main.py")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert _check(tmp_path, "pkg/main.py") == []


def test_the_same_write_reached_from_two_entry_files_is_one_finding_in_its_own_file(tmp_path: Path):
    other = CALLER.format(import_from=".gate").replace("def step", "def other_step")
    files = {"pkg/__init__.py": "", "pkg/gate.py": INPLACE_MODEL, "pkg/main.py": CALLER.format(import_from=".gate"),
             "pkg/other.py": other.replace("step()", "other_step()")}
    _write(tmp_path, files)
    for entries in (("pkg",), ("pkg/main.py", "pkg/other.py")):
        found = _check(tmp_path, *entries)
        assert [(d["code"], *_where(d)) for d in found] == [("GG001", "pkg/gate.py", 12)], (entries, found)


def test_the_editor_keeps_a_finding_in_another_module_at_the_call_in_its_document(tmp_path: Path):
    """The language server shows one document's diagnostics (``own_file=False``): the write in gate.py is shown
    at main.py's call, with the write related; the analysis API's default puts it in gate.py."""
    from gradguard import api

    _write(tmp_path, {"pkg/__init__.py": "", "pkg/gate.py": INPLACE_MODEL,
                      "pkg/main.py": CALLER.format(import_from=".gate")})
    main = tmp_path / "pkg" / "main.py"
    editor = api.analyze_source(main.read_text(), str(main), fixes=False, own_file=False).diagnostics
    assert [(d.code, d.path, d.line) for d in editor] == [("GG001", str(main), 9)]
    assert (str(tmp_path / "pkg" / "gate.py"), 12) in {(r.path, r.line) for r in editor[0].related}
    own = api.analyze_source(main.read_text(), str(main)).diagnostics
    assert [(d.code, d.path, d.line) for d in own] == [("GG001", str(tmp_path / "pkg" / "gate.py"), 12)]


# A module of the project switches grad mode off at its top level: importing it turns graph building off for the
# whole process, so the importer's own training finds a loss with no grad_fn.  The line to change is the switch.
GRAD_OFF = "element 0 of tensors does not require grad"
INFERENCE = """
    import torch

    {switch}


    def embed(model, x):
        {inside}
        return model(x)
"""

USER_TRAIN = """
    import torch
    import torch.nn as nn

    from {import_from} import embed  # noqa: F401
    {extra}

    def train():
        torch.manual_seed(0)
        clf = nn.Linear(4, 2)
        opt = torch.optim.SGD(clf.parameters(), lr=0.1)
        loss = clf(torch.randn(3, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


    if __name__ == "__main__":
        train()
"""

SWITCH_OFF = "torch.set_grad_enabled(False)"
GRAD_LAYOUTS = {
    # name: (files besides the entry, entry, what the entry imports from, the switching module)
    "relative import in a package": ({"pkg/__init__.py": "", "pkg/infer.py": "{inference}"}, "pkg/main.py",
                                     ".infer", "pkg/infer.py"),
    "through a subpackage's __init__": ({"pkg/__init__.py": "", "pkg/inference/__init__.py": "from .infer import embed\n",
                                         "pkg/inference/infer.py": "{inference}"}, "pkg/main.py", ".inference",
                                        "pkg/inference/infer.py"),
    "script beside its module": ({"infer.py": "{inference}"}, "main.py", "infer", "infer.py"),
}


def _grad_files(layout: str, switch: str = SWITCH_OFF, inside: str = "pass", extra: str = ""):
    files, entry, import_from, module = GRAD_LAYOUTS[layout]
    inference = INFERENCE.format(switch=switch, inside=inside)
    files = {name: inference if text == "{inference}" else text for name, text in files.items()}
    return {**files, entry: USER_TRAIN.format(import_from=import_from, extra=extra)}, entry, module


@pytest.mark.parametrize("layout", GRAD_LAYOUTS, ids=str)
def test_an_imported_module_that_switches_grad_mode_off_at_its_top_level(tmp_path: Path, layout: str):
    files, entry, module = _grad_files(layout)
    _write(tmp_path, files)
    ran = _run(tmp_path, entry)
    assert ran.returncode != 0 and GRAD_OFF in ran.stderr, ran.stderr[-2000:]

    found = _check(tmp_path, entry)
    assert [(d["code"], *_where(d)) for d in found] == [("GG103", module, 3)], found
    lines = (tmp_path / entry).read_text().splitlines()
    backward = next(i for i, line in enumerate(lines, 1) if line.strip() == "loss.backward()")
    assert (entry, backward) in {_where(r) for r in found[0]["related"]}, found
    # Placed in another file, the message names the entry file's lines with its name.
    assert f"line {backward} of {Path(entry).name}" in found[0]["message"], found


@pytest.mark.parametrize("case", ["switched on again", "switch inside a function", "the importer sets the mode"])
def test_a_grad_mode_switch_that_is_undone_or_not_run_at_import_is_clean(tmp_path: Path, case: str):
    if case == "switched on again":
        files, entry, _ = _grad_files("relative import in a package", SWITCH_OFF + "\n    torch.set_grad_enabled(True)")
    elif case == "switch inside a function":
        files, entry, _ = _grad_files("relative import in a package", "", inside=SWITCH_OFF)
    else:
        files, entry, _ = _grad_files("relative import in a package", extra="torch.set_grad_enabled(True)")
    _write(tmp_path, files)
    ran = _run(tmp_path, entry)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert _check(tmp_path, entry) == []


def test_the_modules_searched_for_a_grad_mode_switch_are_not_kept_in_full(tmp_path: Path):
    """The search for a switch reads each module the imports load for its imports and its switch alone: a module
    with none is neither kept as a tree nor marked as another file's (that cost a sixth of the analysis of a
    library corpus); the one that switches is read in full, its line named in the message as before."""
    from gradguard import api, messages
    from gradguard.inference import project

    for switch, finds in ((SWITCH_OFF, True), ("", False)):
        root = tmp_path / str(finds)
        files, entry, _ = _grad_files("through a subpackage's __init__", "")
        # the package's ``__init__.py`` imports one more module, which no name the entry uses comes from
        files["pkg/inference/__init__.py"] += "from .setup import DEVICE  # noqa: F401\n"
        _write(root, {**files, "pkg/inference/setup.py": f"import torch\n\n{switch}\nDEVICE = 'cpu'\n"})
        setup = (root / "pkg/inference/setup.py").resolve()
        found = api.analyze_path(root / entry).diagnostics
        assert [(d.code, d.path) for d in found] == ([("GG103", str(setup))] if finds else []), found
        assert (setup in project._PARSED) is finds and setup in project._IMPORTS_READ
        assert any(messages.other_file(node) == str(setup) for _, module in project._PARSED.values() if module
                   for node in ast.walk(module.tree)) is finds


PRUNED_LAYERS = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class PrunedBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
            self.register_buffer("mask", (torch.rand(4, 3, 3, 3) > 0.5).float())

        def forward(self, x):
            {mask}
            return F.relu(self.conv(x))


    class PrunedBlockReference(PrunedBlock):
        def forward(self, x):
            {reference}
"""

PRUNED_MAIN = """
    import sys

    import torch

    from .layers import PrunedBlock, PrunedBlockReference


    def train(block):
        block(torch.randn(2, 3, 5, 5)).pow(2).mean().backward()
        return block.conv.weight.grad


    if __name__ == "__main__":
        torch.manual_seed(0)
        used = PrunedBlock()
        torch.manual_seed(0)
        reference = PrunedBlockReference()
        torch.manual_seed(1)
        grad = train(used)
        torch.manual_seed(1)
        if not torch.allclose(grad, train(reference)):
            sys.exit("gradients differ from the reference")
"""


def _pruned(mask: str, reference: str) -> dict[str, str]:
    return {"pkg/__init__.py": "", "pkg/main.py": PRUNED_MAIN,
            "pkg/layers.py": PRUNED_LAYERS.format(mask=mask, reference=reference)}


def test_a_forward_in_another_module_rebinding_its_weight_data_to_a_product_of_itself(tmp_path: Path):
    """``w.data = torch.mul(w, mask)`` in an imported forward (real 326): the product's graph is dropped, so the
    weight gets the gradient of the masked values as its own, where the mask in the graph gives the pruned
    entries none."""
    _write(tmp_path, _pruned("self.conv.weight.data = torch.mul(self.conv.weight, self.mask)",
                             "return F.relu(F.conv2d(x, self.conv.weight * self.mask, padding=1))"))
    ran = _run(tmp_path, "pkg/main.py")
    assert ran.returncode != 0 and "gradients differ" in ran.stderr, ran.stderr[-2000:]

    found = _check(tmp_path, "pkg/main.py")
    assert [(d["code"], *_where(d)) for d in found] == [("GG102", "pkg/layers.py", 13)], found
    assert ("pkg/main.py", 9) in {_where(r) for r in found[0]["related"]}  # the backward


def test_the_imported_forward_masking_its_weight_under_no_grad_is_clean(tmp_path: Path):
    _write(tmp_path, _pruned(
        "with torch.no_grad(): self.conv.weight.data = self.conv.weight * self.mask",
        "with torch.no_grad(): self.conv.weight.mul_(self.mask)\n            return F.relu(self.conv(x))"))
    ran = _run(tmp_path, "pkg/main.py")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert _check(tmp_path, "pkg/main.py") == []


# A script whose `main()` trains only through a function it imports (no backward of its own): the training module
# builds the optimizer, then a pruner of a third module swaps a layer for a new one (issue 30, real 308).
PRUNE_MODEL = """
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(4, 8)
            self.head = nn.Linear(8, 3)

        def forward(self, x):
            return self.head(self.body(x).tanh())
"""

PRUNER = """
    import torch.nn as nn


    class Shrinker:
        def __init__(self, model):
            self.model = model

        def apply(self):
            self.model.body = nn.Linear(4, 5)
            self.model.head = nn.Linear(5, 3)
"""

PRUNE_TRAIN = """
    import torch
    import torch.nn.functional as F

    from .pruner import Shrinker


    def step(model, optimizer, x, y):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


    def shrink_then_train(model, x, y):
        {first}
        {second}
        step(model, optimizer, x, y)
        return optimizer
"""

PRUNE_MAIN = """
    import sys

    import torch

    from .model import Net
    from .train import shrink_then_train


    def main():
        torch.manual_seed(0)
        model, x, y = Net(), torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
        optimizer = shrink_then_train(model, x, y)
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        if any(id(p) not in held and p.grad is not None for p in model.parameters()):
            sys.exit("gradients of parameters no optimizer holds")


    if __name__ == "__main__":
        main()
"""


def _pruning(first: str, second: str) -> dict[str, str]:
    return {"pkg/__init__.py": "", "pkg/model.py": PRUNE_MODEL, "pkg/pruner.py": PRUNER,
            "pkg/train.py": PRUNE_TRAIN.format(first=first, second=second), "pkg/main.py": PRUNE_MAIN}


BUILD = "optimizer = torch.optim.SGD(model.parameters(), lr=0.5)"
SHRINK = "Shrinker(model).apply()"


def test_an_optimizer_built_before_an_imported_pruner_swaps_layers_is_reported_at_its_construction(tmp_path: Path):
    """``main()`` trains only through the imported ``shrink_then_train``, which builds the optimizer and then has a
    pruner of a third module replace layers: the optimizer's construction is the line to change."""
    _write(tmp_path, _pruning(BUILD, SHRINK))
    ran = _run(tmp_path, "pkg/main.py")
    assert ran.returncode != 0 and "no optimizer holds" in ran.stderr, ran.stderr[-2000:]

    found = _check(tmp_path, "pkg/main.py")
    assert [(d["code"], *_where(d)) for d in found] == [("GG103", "pkg/train.py", 14)], found
    assert {("pkg/train.py", 15), ("pkg/pruner.py", 9)} <= {_where(r) for r in found[0]["related"]}


def test_the_optimizer_built_after_the_imported_pruner_is_clean(tmp_path: Path):
    _write(tmp_path, _pruning(SHRINK, BUILD))
    ran = _run(tmp_path, "pkg/main.py")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert _check(tmp_path, "pkg/main.py") == []
