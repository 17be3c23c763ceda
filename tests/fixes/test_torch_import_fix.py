"""A fix that needs ``torch.no_grad()`` in a file that imports only ``torch.nn``: it adds ``import torch`` above
the file's first import, and only where nothing else in the file is called ``torch``."""

from __future__ import annotations

import pytest
from gradguard.api import analyze_source
from gradguard.config import Config
from gradguard.autofix.writer import fix_text

torch = pytest.importorskip("torch")

BODY = """
conv = nn.Conv1d(1, 2, 3)
conv.weight.fill_(0.5)
out = conv(nn.Parameter(conv.weight.new_ones(1, 1, 6))).sum()
out.backward()
"""


def _fixed(source: str) -> str:
    (d,) = [d for d in analyze_source(source, "t.py", Config(jedi=False)).diagnostics if d.code == "GG002"]
    return fix_text(source, "t.py", Config(jedi=False), unsafe=True).fixed


def test_import_torch_is_added_above_the_first_import_and_the_fix_runs():
    source = '"""Doc."""\nfrom __future__ import annotations\nimport torch.nn as nn\n' + BODY
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        exec(compile(source, "t.py", "exec"), {})  # noqa: S102 - the test's own program
    fixed = _fixed(source)
    assert fixed.splitlines()[2:4] == ["import torch", "import torch.nn as nn"]
    assert "with torch.no_grad():\n    conv.weight.fill_(0.5)" in fixed
    names: dict = {}
    exec(compile(fixed, "t.py", "exec"), names)  # noqa: S102
    assert torch.equal(names["conv"].weight.detach(), torch.full((2, 1, 3), 0.5))
    assert names["conv"].weight.grad is not None


@pytest.mark.parametrize("other_use", [
    "torch = None\n",  # the name means something else
    "def f(torch):\n    return torch\n",  # a parameter called torch
    "class C:\n    torch = 1\n",  # a class attribute assigned by name
    "def f():\n    from mylib import torch\n    return torch\n",  # another module's torch
    "import numpy as torch\n",
])
def test_no_import_is_added_where_the_name_torch_is_taken(other_use):
    source = "import torch.nn as nn\n" + other_use + BODY
    assert _fixed(source) == source


def test_comments_strings_attributes_and_local_imports_of_torch_do_not_block_it():
    source = ("import torch.nn as nn  # torch\nlabel = 'torch'\nclass C:\n    pass\nC.torch = 1\n"
              "def seed():\n    import torch\n    torch.manual_seed(0)\n" + BODY)
    assert _fixed(source).startswith("import torch\nimport torch.nn as nn  # torch\n")
