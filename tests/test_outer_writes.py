"""A name of an enclosing function (``nonlocal``) or of the module (``global``) written on a path that may not run (a
branch of an ``if`` with a test not known, a loop that may run no time, a closure called under such a branch) holds,
where the paths meet, the join of what each path left, as a local does: the saved output it held before is still
among its values.  On each program the path torch runs skips the rebinding and the write corrupts the saved output."""

from __future__ import annotations

import textwrap

import pytest
from programs import found, run_program

SAVED = "w.exp()"  # saved for backward (as its output): the value each name holds before the branch

PROGRAMS = {
    "nonlocal_in_if": '''
        def train():
            w = torch.ones(3, requires_grad=True)
            h = w.exp()

            def refresh():
                nonlocal h
                if w.sum() > 100:
                    h = torch.zeros(3)

            refresh()
            h.add_(1)  # write
            (h * w).sum().backward()
            return [w.grad]
    ''',
    "nonlocal_in_else": '''
        def train():
            w = torch.ones(3, requires_grad=True)
            h = w.exp()

            def touch():
                nonlocal h
                if w.sum() > 100:
                    h = torch.zeros(3)
                else:
                    h.add_(1)  # write
            touch()
            (h * w).sum().backward()
            return [w.grad]
    ''',
    "global_in_for": '''
        h = None

        def step(w, xs):
            global h
            h = w.exp()
            for x in xs:
                h = x.clone()
            h.add_(1)  # write
            return (h * w).sum()

        def train():
            w = torch.ones(3, requires_grad=True)
            step(w, [x for x in [w.detach()] if x.sum() > 100]).backward()
            return [w.grad]
    ''',
    "global_in_while": '''
        h = None

        def step(w):
            global h
            h = w.exp()
            while h.sum() > 100:
                h = torch.zeros(3)
            h.add_(1)  # write
            return (h * w).sum()

        def train():
            w = torch.ones(3, requires_grad=True)
            step(w).backward()
            return [w.grad]
    ''',
    "closure_called_in_helpers_if": '''
        def train():
            w = torch.ones(3, requires_grad=True)
            h = w.exp()

            def reset():
                nonlocal h
                h = torch.zeros(3)

            def maybe(n):
                if n % 100 == 0:
                    reset()

            maybe(int(w.sum()))
            h += 1  # write
            (h * w).sum().backward()
            return [w.grad]
    ''',
    "nonlocal_in_match": '''
        def train():
            w = torch.ones(3, requires_grad=True)
            h = w.exp()

            def pick(n):
                nonlocal h
                match n:
                    case 100:
                        h = torch.zeros(3)

            pick(int(w.sum()))
            h.add_(1)  # write
            (h * w).sum().backward()
            return [w.grad]
    ''',
}


@pytest.mark.parametrize("shape", sorted(PROGRAMS))
def test_an_outer_name_written_on_a_path_that_may_not_run_keeps_its_value_from_the_other(shape):
    src = "import torch\n" + textwrap.dedent(PROGRAMS[shape])
    assert SAVED in src
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run_program(src)
    lines = [d.span.line for d in found("GG001", src)]
    assert lines == [next(i for i, line in enumerate(src.splitlines(), 1) if line.endswith("# write"))]


def test_an_outer_name_rebound_on_every_path_holds_only_the_new_values():
    src = "import torch\n" + textwrap.dedent('''
        def train():
            w = torch.ones(3, requires_grad=True)
            h = w.exp()
            out = (h * w).sum()

            def rebuild():
                nonlocal h
                if w.sum() > 100:
                    h = torch.zeros(3)
                else:
                    h = w.detach().clone()

            rebuild()
            h.add_(1)
            (out + h.sum()).backward()
            return [w.grad]
    ''')
    run_program(src)
    assert found("GG001", src) == []
