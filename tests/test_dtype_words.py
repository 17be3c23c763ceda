"""``file_default_dtype`` given the source text skips its tree walk when the words rule it out: the answer must be
the walk's, whatever the spelling (spaces, continuations and comments after the dot, NFKC identifiers)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gradguard.inference.dtypes import file_default_dtype
from gradguard.knowledge import load_knowledge

FIXTURES = Path(__file__).parent / "fixtures"

SOURCES = [
    "import torch\nx = torch.zeros(3, requires_grad=True)\ny = x.sin()\n",
    "import torch\nm = torch.nn.Linear(2, 2).half()\n",
    "import torch\nm = torch.nn.Linear(2, 2) . \\\n    double()\n",
    "import torch\nm = (torch.nn.Linear(2, 2).  # comment\n     bfloat16())\n",
    "import torch\ny = torch.ones(2).to(torch.float64)\n",
    "import torch\ny = torch.ones(2).to('cpu')\n",
    "import torch\ntorch.set_default_dtype(torch.float64)\n",
    "from torch import autocast\nwith autocast('cpu'):\n    pass\n",
    "import torch\nm = torch.nn.Linear(2, 2).\uff48\uff41\uff4c\uff46()\n",  # fullwidth: Python reads `half`
    "import torch\n# we go to the shop. to it\nx = torch.ones(2)\n",
]


@pytest.mark.parametrize("source", SOURCES)
def test_words_agree_with_the_walk(source: str) -> None:
    knowledge = load_knowledge()
    tree = ast.parse(source)
    assert file_default_dtype(tree, knowledge, source) == file_default_dtype(tree, knowledge)


def test_words_agree_with_the_walk_on_every_fixture() -> None:
    knowledge = load_knowledge()
    for path in sorted(FIXTURES.rglob("*.py")):
        source = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        assert file_default_dtype(tree, knowledge, source) == file_default_dtype(tree, knowledge), path


def test_a_file_without_the_words_has_the_default() -> None:
    knowledge = load_knowledge()
    source = SOURCES[0]
    assert file_default_dtype(ast.parse(source), knowledge, source) == knowledge.default_dtype
