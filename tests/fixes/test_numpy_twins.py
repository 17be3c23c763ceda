"""GG103 NumPy round trips computed with torch twins: the variance and standard deviation (NumPy divides by N,
torch by N - 1 unless told ``correction=0``), ``einsum`` with a module's float32 constant matrix, an array's own
``.mean()``/``.sum()``/``.var()``/``.std()``/``.reshape()``, the legacy ``torch.FloatTensor(array)`` rebuild, and a
name bound to the array and rebound by the rebuild (``var = torch.FloatTensor(var)``).

Each twin is checked against NumPy under torch: the fixed ``value`` returns, on random float32 and float64 inputs,
what the NumPy original returns (values and dtype); the fixed ``train`` gives the gradients of the same loss written
in torch by hand.  Forms whose meaning differs are left alone."""

from __future__ import annotations

import numpy as np
import pytest
from gradguard.config import Config
from gradguard.autofix.writer import fix_text
from gradients import grads_equal
from programs import found

torch = pytest.importorskip("torch")

_PROGRAM = """
import numpy as np
import torch

M = np.array([[0.299, 0.587, 0.114], [-0.147, -0.289, 0.436], [0.615, -0.515, -0.100]], dtype=np.float32)


def value(x):
{body}


def train():
    torch.manual_seed(0)
    w = torch.randn(2, 3, 4, 5, requires_grad=True)
    loss = (value(w * 1.5) * 2.0).sum() + w.pow(2).mean()
    loss.backward()
    return [w.grad]


def intended():
    torch.manual_seed(0)
    w = torch.randn(2, 3, 4, 5, requires_grad=True)
    x = w * 1.5
    loss = ({intended} * 2.0).sum() + w.pow(2).mean()
    loss.backward()
    return [w.grad]
"""

# (the body of ``value``, the same value in torch)
_FORMS = {
    "np_var_axis_reshape_legacy_rebound": (
        "    v = np.var(x.detach().numpy(), axis=0).reshape(1, x.size()[1] * 20)\n"
        "    v = torch.FloatTensor(v)\n"
        "    return v",
        "torch.var(x, dim=0, unbiased=False).reshape(1, 60).float()"),
    "np_std_ddof": (
        "    return torch.tensor(np.std(x.detach().numpy(), axis=(0, 2), ddof=1))",
        "torch.std(x, dim=(0, 2))"),
    "np_var_whole": (
        "    return torch.tensor(np.var(x.detach().numpy()))",
        "torch.var(x, unbiased=False)"),
    "einsum_constant_slice_method_mean": (
        "    a = x.detach().cpu().numpy()\n"
        "    b = np.einsum('cd,bdhw->bchw', M, a)[:, 1:]\n"
        "    return torch.tensor(np.abs(b - 0.5).mean())",
        "(torch.einsum('cd,bdhw->bchw', torch.from_numpy(M).to(x), x)[:, 1:] - 0.5).abs().mean()"),
    "method_sum_axis_keepdims": (
        "    return torch.from_numpy(x.detach().numpy().sum(axis=1, keepdims=True))",
        "x.sum(dim=1, keepdim=True)"),
    "method_var_positional_axis": (
        "    return torch.tensor(x.detach().numpy().var(2))",
        "x.var(2, unbiased=False)"),
    "bound_in_a_with_read_in_a_try": (  # bound once, in a block that runs whole before the read
        "    with torch.enable_grad():\n"
        "        a = x.detach().numpy()\n"
        "    try:\n"
        "        b = a.mean(axis=0)\n"
        "    finally:\n"
        "        pass\n"
        "    return torch.tensor(b)",
        "x.mean(dim=0)"),
    "method_std_reshape_double": (
        "    return torch.DoubleTensor(x.detach().numpy().std(axis=-1).reshape(-1))",
        "x.std(dim=-1, unbiased=False).reshape(-1).double()"),
}


def _fixed(body: str) -> str:
    src = _PROGRAM.replace("{body}", body).replace("{intended}", "0")
    (diag,) = found("GG103", src)
    assert diag.fix is not None and not diag.fix.safe, diag.fix
    out = fix_text(src, "t.py", Config(jedi=False), unsafe=True).fixed
    assert ".numpy()" not in out.split("def train")[0] and not found("GG103", out)
    return out


def _scope(src: str) -> dict:
    scope: dict = {}
    exec(compile(src, "program", "exec"), scope)  # noqa: S102 - the tests' own programs
    return scope


@pytest.mark.parametrize("form", sorted(_FORMS))
def test_a_numpy_computation_is_its_torch_twin(form):
    body, intended = _FORMS[form]
    src = _PROGRAM.replace("{body}", body).replace("{intended}", "0")
    fixed = _fixed(body)
    original, translated = _scope(src)["value"], _scope(fixed)["value"]
    rng = np.random.default_rng(0)
    for dtype in (torch.float32, torch.float64):
        for _ in range(3):
            x = torch.from_numpy(rng.standard_normal((2, 3, 4, 5))).to(dtype)
            want, got = original(x), translated(x)
            assert got.dtype == want.dtype and got.shape == want.shape, (dtype, got.dtype, want.dtype)
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (dtype, got, want)
    ran = _scope(fixed.replace("{intended}", intended))
    reference = _scope(_PROGRAM.replace("{body}", "    return x").replace("{intended}", intended))["intended"]
    assert grads_equal(ran["train"](), reference())


@pytest.mark.parametrize("body", [
    "    return torch.tensor(np.var(x.detach().numpy(), axis=0, dtype=np.float64))",  # a keyword torch lacks
    "    return torch.tensor(np.var(x.detach().numpy(), axis=None))",  # a computed or None axis
    "    return torch.tensor(x.detach().numpy().mean(dtype=np.float64))",
    "    return torch.tensor(x.detach().numpy().reshape(-1, order='F'))",  # Fortran order is NumPy's alone
    "    return torch.tensor(np.einsum('cd,bdhw->bchw', np.array(M, dtype=np.float64), x.detach().numpy()))",
    "    return torch.tensor(np.einsum('cd,bdhw->bchw', M.astype(np.float64), x.detach().numpy()))",
    "    return torch.tensor(np.einsum('cd,bdhw->bchw', M, x.detach().numpy(), optimize=True))",
])
def test_no_torch_twin_where_the_meaning_differs(body):
    src = _PROGRAM.replace("{body}", body).replace("{intended}", "0")
    (diag,) = found("GG103", src)
    assert diag.fix is None


def test_no_einsum_twin_with_a_float64_constant():
    src = _PROGRAM.replace("dtype=np.float32)", ")").replace("{intended}", "0").replace(
        "{body}", "    return torch.tensor(np.einsum('cd,bdhw->bchw', M, x.detach().numpy()))")
    (diag,) = found("GG103", src)
    assert diag.fix is None


def test_no_rewrite_of_a_rebound_name_read_after_a_continue():
    src = _PROGRAM.replace("{intended}", "0").replace("{body}", (
        "    out = []\n"
        "    for k in range(2):\n"
        "        v = np.var(x.detach().numpy(), axis=0)\n"
        "        if k:\n"
        "            continue\n"
        "        v = torch.FloatTensor(v)\n"
        "        out.append(v)\n"
        "    return out[0] + torch.as_tensor(v)"))
    (diag,) = found("GG103", src)
    assert diag.fix is None
