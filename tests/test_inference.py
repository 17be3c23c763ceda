"""Tensor inference: in-place syntax on things that are not tensors (or not at risk) is never flagged."""

from __future__ import annotations

import textwrap

import pytest

from gradguard.api import analyze_source

NOT_TENSORS = {
    "ints": """
        import torch
        x = torch.randn(3, requires_grad=True)
        n = 0
        for i in range(10):
            n += i
        y = torch.sigmoid(x)
        n *= 2
        y.sum().backward()
    """,
    "lists": """
        import torch
        x = torch.randn(3, requires_grad=True)
        losses = []
        y = torch.exp(x)
        losses += [1.0]
        losses[0] = 2.0
        y.sum().backward()
    """,
    "numpy": """
        import numpy as np
        import torch
        a = np.zeros(3)
        x = torch.randn(3, requires_grad=True)
        y = torch.tanh(x)
        a += 1
        a[0] = 5
        y.sum().backward()
    """,
    "strings": """
        import torch
        s = "torch"
        s += "!"
        x = torch.randn(3, requires_grad=True)
        (x * 2).sum().backward()
    """,
    "floats_from_item": """
        import torch
        x = torch.randn(3, requires_grad=True)
        y = torch.sigmoid(x)
        total = y.sum().item()
        total += 1.0
        y.sum().backward()
    """,
    "unknown_function_params": """
        import torch
        def update(buf, value):
            buf += value
            buf[0] = 0
            return buf
    """,
    "tensor_without_grad": """
        import torch
        mask = torch.zeros(3)
        mask[0] = 1
        mask += 1
        counts = torch.zeros(10, dtype=torch.long)
        counts.index_add_(0, torch.tensor([1]), torch.tensor([1]))
    """,
}


@pytest.mark.parametrize("name", sorted(NOT_TENSORS))
def test_no_findings_on_non_tensors(name):
    source = textwrap.dedent(NOT_TENSORS[name])
    assert analyze_source(source).diagnostics == [], name


def test_forward_parameters_are_tensors():
    source = textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = nn.LayerNorm(8)
                self.ff = nn.Linear(8, 8)

            def forward(self, x):
                x += self.ff(self.norm(x))
                return x
    """)
    (diag,) = analyze_source(source).diagnostics
    assert (diag.code, diag.line) == ("GG001", 12)
    assert {r.line for r in diag.related} == {12, 13}


def test_columns_count_code_points_not_bytes():
    source = 'import torch\nx = torch.zeros(3, requires_grad=True); s = "é"; x += 1\n'
    (diag,) = analyze_source(source).diagnostics
    assert diag.span.column == source.splitlines()[1].index("x += 1") + 1
