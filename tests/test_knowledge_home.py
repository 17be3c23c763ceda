"""Each torch fact has one home: ``server/gradguard/knowledge/``.

A table of torch names written anywhere else (a set, list, tuple or dict of five or more strings that name
something of ``torch``, ``torch.Tensor``, ``torch.nn.functional``, ``nn.Module`` or an ``nn`` layer class) is a second copy of a fact that
can drift from the first, as ``PIECES`` in the fixes and the interpreter's multi-output table once did.  The torch
names are read from ``torch_ops.json`` (``python_names``, generated from the installed torch), so this test needs no
torch.  Python's builtin names (``sum``, ``float``, ``len``) do not count: a table of builtins is about Python.
"""

from __future__ import annotations

import ast
import builtins
import json
import sys
from pathlib import Path

SERVER = Path(__file__).resolve().parents[1] / "server"
if str(SERVER) not in sys.path:
    sys.path.insert(0, str(SERVER))

from gradguard.knowledge import TABLE_PATH  # noqa: E402

PACKAGE = SERVER / "gradguard"
# The probe runs under torch and asks it directly; its tables belong to it (and to its own tests).
OUTSIDE = ("knowledge", "probe")
LIMIT = 5
PREFIXES = ("torch.nn.functional.", "torch.Tensor.", "torch.nn.", "torch.", "F.", "nn.")


def _torch_names() -> frozenset[str]:
    table = json.loads(TABLE_PATH.read_text(encoding="utf-8"))
    names = frozenset().union(*map(frozenset, table["python_names"].values()), table["modules"])
    return names - frozenset(dir(builtins))


def is_torch_name(text: str, names: frozenset[str]) -> bool:
    for prefix in PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    return text in names


def torch_tables(source: str, names: frozenset[str]) -> list[tuple[int, list[str]]]:
    """(line, names) of each literal collection in ``source`` holding at least LIMIT torch names."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        else:
            continue
        hits = [e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)
                and is_torch_name(e.value, names)]
        if len(hits) >= LIMIT:
            found.append((node.lineno, hits))
    return found


def test_the_recogniser_sees_a_table_and_passes_builtins():
    names = _torch_names()
    assert {"add", "view", "shape", "T", "relu", "parameters"} <= names
    assert torch_tables('X = {"view", "reshape", "t", "transpose", "narrow"}', names)
    assert torch_tables('Y = ("torch.split", "torch.chunk", "F.relu", "nn.Linear", "torch.Tensor.add")', names)
    assert torch_tables('Z = {"clip": 1, "exp": 2, "log": 3, "sqrt": 4, "tanh": 5}', names)
    assert not torch_tables('B = ("sum", "min", "max", "abs", "round", "len")', names)
    assert not torch_tables('F4 = ("view", "reshape", "t", "transpose")', names)


def test_no_torch_name_table_outside_knowledge():
    names = _torch_names()
    found = [f"{path.relative_to(SERVER)}:{line}: {hits[:6]}{'...' if len(hits) > 6 else ''}"
             for path in sorted(PACKAGE.rglob("*.py")) if not set(path.relative_to(PACKAGE).parts) & set(OUTSIDE)
             for line, hits in torch_tables(path.read_text(encoding="utf-8"), names)]
    assert not found, "torch name tables outside server/gradguard/knowledge/ (move them to knowledge/names.py):\n" + \
        "\n".join(found)


def test_the_tables_read_from_torch_say_what_torch_does():
    """The facts two tables once disagreed on, as torch 2.13 answers them (checked by running it)."""
    from gradguard.knowledge import names as N

    # Pieces torch refuses in-place writes to ("Output 0 of Split is a view and is being modified inplace"):
    # tensor_split's pieces are AsStrided views it lets you write, unsafe_chunk's are no views at all.
    assert N.PIECES == {"chunk", "split", "split_with_sizes", "unbind"}
    assert {"tensor_split", "hsplit"} <= N.SEQUENCE_VIEWS and not {"unsafe_chunk", "unsafe_split"} & N.SEQUENCE_VIEWS
    assert N.VIEW_ATTRS == {"T", "mT", "H", "mH", "real", "imag"}
    assert N.SHARING_ATTRS == N.VIEW_ATTRS | {"data"}  # x.data shares memory, autograd does not see it
    assert {"add", "clamp", "sigmoid", "eq"} <= N.OUT_OF_PLACE_METHODS
    assert not {"bernoulli", "resize", "view", "fill"} & N.OUT_OF_PLACE_METHODS
    assert N.BOOL_RESULTS >= {"eq", "lt", "logical_and"} and "add" not in N.BOOL_RESULTS
    assert {"view", "transpose", "split", "detach", "narrow"} <= N.VIEW_METHODS
