"""The generated torch knowledge table: fresh for the installed torch, and true according to torch.

Spot checks do not restate beliefs about torch: each one reads the table and then asks torch
itself (in-place write, then backward) whether the table is right.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SERVER = Path(__file__).resolve().parents[1] / "server"
if str(SERVER) not in sys.path:
    sys.path.insert(0, str(SERVER))

from gradguard.knowledge import TABLE_PATH, ModuleInfo, OpInfo, load_knowledge  # noqa: E402

SAVED_MODIFIED = "one of the variables needed for gradient computation has been modified by an inplace operation"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SERVER), os.environ.get("PYTHONPATH", "")])}


def _shipped() -> dict:
    return json.loads(TABLE_PATH.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if torch.__version__ != _shipped()["torch_version"]:
        pytest.skip(f"table made for torch {_shipped()['torch_version']}, installed {torch.__version__}")
    return torch


@pytest.fixture(scope="module")
def kb():
    return load_knowledge()


# ------------------------------------------------------------------ (a) the table is up to date
def test_regenerated_table_matches_shipped_json(torch):
    from gradguard.knowledge import generate

    fresh, shipped = generate.build(), _shipped()
    stale = {section: sorted(k for k in set(fresh[section]) | set(shipped[section])
                             if fresh[section].get(k) != shipped[section].get(k))
             for section in ("ops", "inplace", "modules") if fresh[section] != shipped[section]}
    assert fresh == shipped, f"rerun python -m gradguard.knowledge.generate; stale entries: {stale}"


def test_cli_writes_identical_file_and_check_detects_drift(torch, tmp_path):
    out = tmp_path / "ops.json"
    cmd = [sys.executable, "-m", "gradguard.knowledge.generate", "--output", str(out)]
    subprocess.run(cmd, env=ENV, check=True, capture_output=True, timeout=120)
    assert out.read_text(encoding="utf-8") == TABLE_PATH.read_text(encoding="utf-8")
    out.write_text(out.read_text(encoding="utf-8").replace('"sigmoid"', '"sigmoid_typo"'), encoding="utf-8")
    res = subprocess.run(cmd + ["--check"], env=ENV, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "OUT OF DATE" in res.stdout


# ----------------------------------------------------------- (b) spot checks, confirmed by torch
def _raises(fn) -> str | None:
    try:
        fn()
    except RuntimeError as e:
        return str(e)
    return None


def _saved_by_torch(torch, fn, shapes, grad: int, mutate: int | None) -> bool:
    """Only input ``grad`` requires grad; write in place to input ``mutate`` (None: to the result),
    then backward.  True when autograd complains that a saved tensor was modified."""
    torch.manual_seed(0)
    args = [torch.rand(s) * 0.8 + 0.1 for s in shapes]
    args[grad] = args[grad].requires_grad_() * 1   # non-leaf, so it may be written in place
    out = fn(*args)
    (out if mutate is None else args[mutate]).mul_(1.5)
    msg = _raises(lambda: out.sum().backward())
    assert msg is None or SAVED_MODIFIED in msg, msg
    return msg is not None


S = (3, 4)
OPS = {   # table name: (call, input shapes[, their positions in the call])
    "sigmoid": (lambda t: lambda x: t.sigmoid(x), [S]),
    "exp": (lambda t: lambda x: t.exp(x), [S]),
    "tanh": (lambda t: lambda x: t.tanh(x), [S]),
    "relu": (lambda t: lambda x: t.relu(x), [S]),
    "softmax": (lambda t: lambda x: t.nn.functional.softmax(x, -1), [S]),
    "log_softmax": (lambda t: lambda x: t.nn.functional.log_softmax(x, -1), [S]),
    "sqrt": (lambda t: lambda x: t.sqrt(x), [S]),
    "sin": (lambda t: lambda x: t.sin(x), [S]),
    "gelu": (lambda t: lambda x: t.nn.functional.gelu(x), [S]),
    "add": (lambda t: lambda a, b: t.add(a, b), [S, S]),
    "sub": (lambda t: lambda a, b: t.sub(a, b), [S, S]),
    "mul": (lambda t: lambda a, b: t.mul(a, b), [S, S]),
    "div": (lambda t: lambda a, b: t.div(a, b), [S, S]),
    "maximum": (lambda t: lambda a, b: t.maximum(a, b), [S, S]),
    "matmul": (lambda t: lambda a, b: t.matmul(a, b), [(3, 4), (4, 5)]),
    "mm": (lambda t: lambda a, b: t.mm(a, b), [(3, 4), (4, 5)]),
    "linear": (lambda t: lambda x, w, b: t.nn.functional.linear(x, w, b), [(3, 4), (5, 4), (5,)]),
    "addmm": (lambda t: lambda c, a, b: t.addmm(c, a, b), [(3, 5), (3, 4), (4, 5)]),
    # F.layer_norm(input, normalized_shape, weight, bias): the tensors sit at positions 0, 2, 3
    "layer_norm": (lambda t: lambda x, w, b: t.nn.functional.layer_norm(x, (4,), w, b), [(2, 4), (4,), (4,)], [0, 2, 3]),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_saved_inputs_and_result_agree_with_torch(torch, kb, name):
    info = kb.op(name)
    assert isinstance(info, OpInfo) and info.differentiable
    make, shapes, *positions = OPS[name]
    fn, pos = make(torch), positions[0] if positions else list(range(len(shapes)))
    for g in range(len(shapes)):
        assert _saved_by_torch(torch, fn, shapes, g, None) == (pos[g] in info.saves_result), ("result", g)
        for k in range(len(shapes)):
            expected = pos[g] in info.saves_args.get(pos[k], ())
            assert _saved_by_torch(torch, fn, shapes, g, k) == expected, (pos[k], pos[g])


def test_spot_beliefs(kb):
    """The classic cases read right (the parametrized test above confirms each with torch)."""
    for name in ("sigmoid", "exp", "tanh", "relu", "softmax"):
        assert kb.op(name).saves_result == {0}, name
    for name in ("add", "sub"):
        assert not kb.op(name).saves_args and not kb.op(name).saves_result, name
    assert kb.op("mul").saves_args == {0: {1}, 1: {0}}   # b is saved only when a requires grad


def test_linear_module_saves_its_input(torch, kb):
    info = kb.module("Linear")
    assert isinstance(info, ModuleInfo) and info.has_params and info.functional == "linear"
    assert "params" in info.saves_input
    for cond in ("params", "input"):
        torch.manual_seed(0)
        m = torch.nn.Linear(4, 3)
        m.requires_grad_(cond == "params")
        x = torch.rand(2, 4)
        if cond == "input":
            x = x.requires_grad_() * 1
        y = m(x)
        x.mul_(2)
        msg = _raises(lambda: y.sum().backward())
        assert (msg is not None and SAVED_MODIFIED in msg) == (cond in info.saves_input), (cond, msg)


@pytest.mark.parametrize("cls, args, kwargs", [("LSTM", (3, 4), {"num_layers": 3, "bidirectional": True, "proj_size": 2}),
                                               ("GRU", (3, 4), {"num_layers": 4}), ("RNNCell", (3, 4), {}),
                                               ("Linear", (3, 4), {}), ("LayerNorm", (4,), {})])
def test_parameter_names_are_the_ones_torch_gives(torch, kb, cls, args, kwargs):
    """Every parameter an instance has is named by the table (layer indices as `{n}`), and its other attributes
    are not (`getattr(rnn, f"bias_hh_l{i}")` is read as a parameter only when torch's names say so)."""
    module = getattr(torch.nn, cls)(*args, **kwargs)
    info = kb.module(cls)
    for name, _ in module.named_parameters():
        assert info.has_parameter(name), name
    for name in ("hidden_size", "num_layers", "training", "bias_hh", "weight_l0"):
        if not isinstance(getattr(module, name, None), torch.nn.Parameter):
            assert not info.has_parameter(name), name


@pytest.mark.parametrize("name, call", [("relu", lambda t, x: t.nn.ReLU()(x)),
                                        ("sigmoid", lambda t, x: t.nn.Sigmoid()(x))])
def test_activation_modules_save_output(torch, kb, name, call):
    info = kb.module("ReLU" if name == "relu" else "Sigmoid")
    assert info.saves_output == {"input"} and not info.has_params
    x = torch.rand(2, 4).requires_grad_()
    y = call(torch, x)
    y.mul_(2)
    assert SAVED_MODIFIED in (_raises(lambda: y.sum().backward()) or "")


@pytest.mark.parametrize("name, call", [("unbind", lambda x: x.unbind(0)), ("split", lambda x: x.split(2)),
                                        ("chunk", lambda x: x.chunk(2)),
                                        ("split_with_sizes", lambda x: x.split_with_sizes([1, 3])),
                                        ("tensor_split", lambda x: x.tensor_split(2)),
                                        ("unsafe_split", lambda x: x.unsafe_split(2))])
def test_multi_view_ops_agree_with_torch(torch, kb, name, call):
    info = kb.op(name)
    outs = call(torch.rand(4, 6).requires_grad_() * 1)
    msg = _raises(lambda: outs[0].mul_(2))
    if info.multi_view is None:
        assert msg is None, msg
    else:
        assert info.view and msg is not None and "is a view and is being modified inplace" in msg
        assert f"Output 0 of {info.multi_view} is a view" in msg
    if name in ("unbind", "split", "chunk"):
        assert info.multi_view is not None


@pytest.mark.parametrize("name, call", [("transpose", lambda x: x.transpose(0, 1)), ("view", lambda x: x.view(12)),
                                        ("select", lambda x: x.select(0, 0)), ("detach", lambda x: x.detach()),
                                        ("expand", lambda x: x[:1].expand(3, 4)), ("exp", lambda x: x.exp()),
                                        ("clone", lambda x: x.clone())])
def test_views_agree_with_torch(torch, kb, name, call):
    x = torch.rand(3, 4)
    out = call(x)
    shares = out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert kb.op(name).view == shares


def test_inplace_names_agree_with_torch(torch, kb):
    for name in ("reshape_", "view_"):
        assert not kb.is_inplace(name) and not hasattr(torch.Tensor, name)
    for name in ("requires_grad_", "detach_", "share_memory_"):
        assert hasattr(torch.Tensor, name) and not kb.is_inplace(name)
        x = torch.rand(3)
        before = x._version
        getattr(x, name)()
        assert x._version == before, name   # they do not write tensor data
    for name, twin in (("add_", "add"), ("mul_", "mul"), ("relu_", "relu"), ("sigmoid_", "sigmoid"),
                       ("clamp_", "clamp"), ("copy_", None), ("zero_", None), ("t_", "t")):
        assert kb.is_inplace(name) and kb.inplace_twin(name) == twin, name
    assert not kb.is_inplace("add") and kb.inplace_twin("add") is None
    for name, args in (("add_", (1.0,)), ("mul_", (2.0,)), ("zero_", ()), ("copy_", (torch.ones(3),))):
        x = torch.rand(3)
        before = x._version
        getattr(x, name)(*args)
        assert x._version > before, name
    for name in ("relu_", "elu_", "leaky_relu_", "hardtanh_", "rrelu_", "threshold_", "celu_", "selu_"):
        assert kb.is_inplace(name), name


def test_inplace_kwarg_lists_agree_with_signatures(torch, kb):
    import inspect

    F = torch.nn.functional
    assert {"relu", "dropout", "leaky_relu", "hardtanh", "elu"} <= kb.inplace_kwarg_functions
    assert {"ReLU", "Dropout", "LeakyReLU", "ReLU6", "SiLU"} <= kb.inplace_kwarg_modules
    for name in kb.inplace_kwarg_functions:
        assert "inplace" in inspect.signature(getattr(F, name)).parameters, name
    for name in kb.inplace_kwarg_modules:
        assert "inplace" in inspect.signature(getattr(torch.nn, name).__init__).parameters, name
    assert kb.module("ReLU").inplace_kwarg and not kb.module("Linear").inplace_kwarg


# ---------------------------------------------------------------- (c) the loader needs no torch
def test_loader_works_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from gradguard.knowledge import load_knowledge\n"
        "kb = load_knowledge()\n"
        "assert kb is load_knowledge()\n"
        "assert kb.op('mul').saves_args[1] == {0} and kb.op('sigmoid').saves_result == {0}\n"
        "assert kb.is_inplace('add_') and not kb.is_inplace('requires_grad_')\n"
        "assert kb.module('Linear').has_params and kb.op('no_such_op') is None\n"
        "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "print('ok', kb.torch_version)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.startswith("ok"), res.stderr


def test_table_shape():
    data = _shipped()
    assert data["format"] == 1 and data["torch_version"]
    assert list(data) == sorted(data)
    for name, op in data["ops"].items():
        assert set(op) == {"saves_args", "saves_result", "view", "multi_view", "differentiable", "sources",
                           "returns", "tuple_saves_args", "params", "overloads"}, name
        for form in op["overloads"]:
            assert set(form) == {"kinds", "required", "names", "saves_args", "saves_result"}, name
            assert set(form["kinds"]) <= {"T", "S"} and form["required"] <= len(form["kinds"]), name
        assert op["returns"] in ("tensor", "sequence", "tuple"), name
        assert all(k.isdigit() for k in op["saves_args"]) and op["sources"], name
    for name, mod in data["modules"].items():
        assert set(mod) == {"saves_input", "saves_output", "saves_params", "has_params", "functional",
                            "inplace_kwarg", "returns", "bases", "param_names"}, name
        assert set(mod["saves_input"]) | set(mod["saves_output"]) | set(mod["saves_params"]) <= {"input", "params"}
    kb = load_knowledge()
    assert hash(kb.op("mul")) == hash(kb.op("mul")) and kb.op("mul").saves_args[0] == frozenset({1})


def test_tuple_overloads_save_what_torch_saves():
    """max(x) saves x, max(x, dim) does not: writing x after the dim form must run clean."""
    torch = pytest.importorskip("torch")
    kb = load_knowledge()
    assert kb.op("max").saves_args and not kb.op("max").tuple_saves_args
    x = torch.randn(3, 4, requires_grad=True)
    y = x * 1
    values = y.max(-1, keepdim=True).values
    y -= 1
    values.sum().backward()  # runs: the dim form saved only indices
    y = x * 1
    full = y.max()
    y -= 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        full.backward()


# A call of each third-party view function whose result torch can return as a view of its input.
_VIEW_CALLS = {
    "einops.rearrange": lambda f, t: f(t, "a b -> b a"),
    "einops.repeat": lambda f, t: f(t, "a b -> a b c", c=2),
}


@pytest.mark.parametrize("qualname", sorted(_VIEW_CALLS))
def test_third_party_view_functions_return_views(qualname):
    """The table's claim, checked against the installed library: the result shares the input's memory and
    an in-place write to it with grad on raises torch's view-of-a-leaf error."""
    torch = pytest.importorskip("torch")
    module_name, _, attr = qualname.rpartition(".")
    module = pytest.importorskip(module_name)
    assert load_knowledge().third_party_view(qualname)
    leaf = torch.randn(2, 3, requires_grad=True)
    view = _VIEW_CALLS[qualname](getattr(module, attr), leaf)
    assert view._base is leaf and view.untyped_storage().data_ptr() == leaf.untyped_storage().data_ptr()
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        view.mul_(2)


def test_every_third_party_view_function_has_a_check():
    assert set(load_knowledge().third_party_views) == set(_VIEW_CALLS)


# Call shapes whose overloads save different things: (call, input shapes, kinds the analysis sees).  Each is run
# with one input requiring grad at a time, writing an input or the result in place, and torch's answer must be
# what ``OpInfo.saves_for`` says for that shape.
OVERLOAD_CALLS = {
    "pow(x, 2.0)": ("pow", lambda t: lambda x: t.pow(x, 2.0), [S], ("T", "S")),
    "pow(x, y)": ("pow", lambda t: lambda x, y: t.pow(x, y), [S, S], ("T", "T")),
    "pow(2.0, y)": ("pow", lambda t: lambda y: t.pow(2.0, y), [S], ("S", "T")),
    "max(x)": ("max", lambda t: lambda x: t.max(x), [S], ("T",)),
    "max(x, y)": ("max", lambda t: lambda x, y: t.max(x, y), [S, S], ("T", "T")),
    "min(x, y)": ("min", lambda t: lambda x, y: t.min(x, y), [S, S], ("T", "T")),
    "mul(x, 3.0)": ("mul", lambda t: lambda x: t.mul(x, 3.0), [S], ("T", "S")),
    "mul(x, y)": ("mul", lambda t: lambda x, y: t.mul(x, y), [S, S], ("T", "T")),
    "sum(x)": ("sum", lambda t: lambda x: t.sum(x), [S], ("T",)),
    "clamp(x, 0.2, 0.8)": ("clamp", lambda t: lambda x: t.clamp(x, 0.2, 0.8), [S], ("T", "S", "S")),
}


@pytest.mark.parametrize("call", sorted(OVERLOAD_CALLS))
def test_overload_saves_agree_with_torch(torch, kb, call):
    name, make, shapes, kinds = OVERLOAD_CALLS[call]
    saves_args, saves_result = kb.op(name).saves_for(kinds)
    tensor_positions = [k for k, kind in enumerate(kinds) if kind == "T"]
    fn = make(torch)
    for g, pos_g in enumerate(tensor_positions):
        assert _saved_by_torch(torch, fn, shapes, g, None) == (pos_g in saves_result), ("result", g)
        for k, pos_k in enumerate(tensor_positions):
            expected = pos_g in saves_args.get(pos_k, ())
            assert _saved_by_torch(torch, fn, shapes, g, k) == expected, (pos_k, pos_g)


def test_integral_results_are_integral_for_float_inputs(torch, kb):
    """Every op the table says returns an integer or bool tensor does so for a float input that requires grad,
    and the result does not require grad."""
    assert {"argmax", "eq", "gt", "long", "nonzero"} <= kb.integral_results
    checked = 0
    for name in sorted(kb.integral_results):
        for fn in (getattr(torch, name, None), getattr(torch.Tensor, name, None)):
            for extra in ((), (1,), (torch.rand(4, 4),)):
                x = torch.rand(4, 4, requires_grad=True)
                try:
                    out = fn(x, *extra)
                except Exception:
                    continue
                if isinstance(out, torch.Tensor):
                    assert not out.is_floating_point() and not out.requires_grad, name
                    checked += 1
    assert checked >= len(kb.integral_results)


def test_integral_dtypes_cannot_require_grad(torch, kb):
    assert {"long", "int64", "bool", "uint8"} <= kb.integral_dtypes
    for name in ("long", "int32", "bool", "uint8"):
        with pytest.raises(RuntimeError, match="floating point"):
            torch.zeros(2, dtype=getattr(torch, name)).requires_grad_()


def test_module_wrappers_return_the_module_given(torch, kb):
    import importlib
    import warnings
    assert "torch.nn.utils.weight_norm" in kb.module_wrappers
    for qualname in kb.module_wrappers:
        owner, _, name = qualname.rpartition(".")
        layer = torch.nn.Linear(3, 3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert getattr(importlib.import_module(owner), name)(layer) is layer, qualname


def test_keyword_arguments_pick_the_overload_of_their_position(kb):
    """`torch.pow(input=h, exponent=0.5)` binds like `torch.pow(h, 0.5)` (Tensor_Scalar: no result saved), and
    `pow(h, exponent=e)` with a tensor of unknown kind may be either overload."""
    pow_ = kb.op("pow")
    scalar = pow_.saves_for(("T", "S"))
    assert not scalar[1]
    assert pow_.saves_for(("T",), {"exponent": "S"}) == scalar
    assert pow_.saves_for(("T",), {"self": None, "exponent": "S"}) == scalar
    assert pow_.saves_for(("T", "T"))[1]
