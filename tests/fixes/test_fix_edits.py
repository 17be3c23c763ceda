"""The fix machinery on small programs: what each strategy writes, what it leaves alone, when it is unsafe,
and the CLI's --fix / --unsafe-fixes / --diff."""

from __future__ import annotations

import json
import textwrap

import pytest
from gradguard.api import analyze_source
from gradguard.cli import main
from gradguard.config import Config
from gradguard.diagnostics import Fix, TextEdit
from gradguard.text import apply_edits, diff_edits
from gradguard.autofix.plan import choose
from gradguard.autofix.writer import fix_text


def analyse(src: str):
    return analyze_source(textwrap.dedent(src), "t.py", Config(jedi=False)).diagnostics


def only_fix(src: str) -> Fix | None:
    diags = analyse(src)
    assert len({d.fix for d in diags}) == 1, [(d.line, d.code, d.fix) for d in diags]
    return diags[0].fix


def fixed(src: str, unsafe: bool = False) -> str:
    return fix_text(textwrap.dedent(src), "t.py", Config(jedi=False), unsafe=unsafe).fixed


# ---------------------------------------------------------------------------- text edits
@pytest.mark.parametrize(
    "old, new",
    [
        ("a = 1\nb = 2\n", "a = 1\nc = 3\nb = 2\n"),
        ("a = 1\nb = 2", "a = 1\nb = 22"),
        ("x = 'é'; y += 1\r\nz = 2\r\n", "x = 'é'; y = y + 1\r\nz = 2\r\n"),
        ("", "a\n"),
        ("a\nb\nc\n", "a\nc\n"),
        ("if x:\n    y += 1\n", "if x:\n    with torch.no_grad():\n        y += 1\n"),
    ],
)
def test_diff_edits_round_trip(old, new):
    edits = diff_edits(old, new)
    assert apply_edits(old, edits) == new
    assert diff_edits(old, old) == ()


def test_edits_count_code_points():
    old = "s = 'ü𝄞'; x += 1\n"
    (edit,) = diff_edits(old, "s = 'ü𝄞'; x = x + 1\n")
    assert old.splitlines()[0][edit.column - 1 :].startswith("+=") or old[edit.column - 1] in "x+"


def test_choose_takes_one_fix_per_line_and_skips_unsafe():
    a = Fix("a", True, (TextEdit(2, 1, 2, 5, "x"),))
    b = Fix("b", True, (TextEdit(2, 7, 2, 9, "y"),))  # same line as a: next pass
    c = Fix("c", False, (TextEdit(4, 1, 4, 2, "z"),))
    same_as_a = Fix("a", True, (TextEdit(2, 1, 2, 5, "x"),))
    assert choose([b, a, c, same_as_a], unsafe=False) == [a]
    assert choose([b, a, c], unsafe=True) == [a, c]


# ---------------------------------------------------------------------------- formatting survives
def test_everything_but_the_write_is_left_byte_for_byte():
    src = textwrap.dedent(
        """\
        import torch   # the module
        def f():
            x = torch.randn(3, requires_grad=True)
            # a comment above
            y  =  torch.sigmoid( x )   # odd spacing
            y  +=  ( 1 +
                     2 )   # keep me
            return (y *
                    2)
        """
    )
    out = fixed(src)
    assert out.splitlines()[:5] == src.splitlines()[:5]
    assert "    y  =  y + ( 1 +\n             2 )   # keep me" in out
    assert out.endswith("    return (y *\n            2)\n")


def test_crlf_and_indentation_of_inserted_lines():
    src = "import torch\r\ndef f(w):\r\n\tx = torch.randn(3, requires_grad=True)\r\n\ty = x.exp()\r\n\ty[0] = 1\r\n\treturn y\r\n"
    out = fixed(src)
    assert out == src.replace("\ty[0] = 1", "\ty = y.clone()\r\n\ty[0] = 1")


# ---------------------------------------------------------------------------- GG001 choices
def test_rebinding_parenthesizes_the_operand():
    src = """
    import torch
    def f(a, b):
        x = torch.randn(3, requires_grad=True)
        y = x.exp()
        y -= a - b
        return y
    """
    fix = only_fix(src)
    assert fix.safe and "y = y - (a - b)" in fixed(src)


def test_a_container_holding_the_tensor_makes_rebinding_unsafe():
    src = """
    import torch
    def f():
        x = torch.randn(3, requires_grad=True)
        outs = []
        h = torch.tanh(x * 2)
        outs.append(h)
        h.mul_(0.5)
        return torch.stack(outs) + h
    """
    fix = only_fix(src)
    assert fix is not None and not fix.safe and "`outs`" in fix.title
    assert fixed(src) == textwrap.dedent(src)  # --fix applies only safe fixes
    assert "h = h.mul(0.5)" in fixed(src, unsafe=True)


def test_a_rebinding_nothing_reads_is_not_offered():
    """With `h` never read again, `h = h.mul(0.5)` would only take the write away from `outs` (and the caller's
    `x` in the second program): no fix, rather than one that deletes the write."""
    held = """
    import torch
    def f():
        x = torch.randn(3, requires_grad=True)
        outs = []
        h = torch.tanh(x * 2)
        outs.append(h)
        h.mul_(0.5)
        return torch.stack(outs)
    """
    caller = """
    import torch
    def f(x: torch.Tensor):
        w = torch.randn(3, requires_grad=True)
        y = x * w
        x.add_(1)
        return y
    """
    for src in (held, caller):
        assert only_fix(src) is None
        assert fixed(src, unsafe=True) == textwrap.dedent(src)


def test_a_name_of_an_enclosing_scope_is_not_rebound():
    """`buf = torch.mul(h, 0.5)` inside `update` would make a new local: the caller's `buf` keeps its values."""
    src = """
    import torch
    def f():
        w = torch.randn(4, 3, requires_grad=True)
        buf = torch.empty(5, 3)
        h = torch.tanh(torch.randn(5, 4) @ w)
        def update():
            torch.mul(h, 0.5, out=buf)
        update()
        return buf.sum()
    """
    assert fixed(src, unsafe=True) == textwrap.dedent(src)


def test_a_view_read_later_gets_the_clone_where_it_was_saved():
    src = """
    import torch
    def f():
        x = torch.randn(3, requires_grad=True)
        y = torch.sigmoid(x * 2)
        flat = y.view(-1)
        flat.add_(1)
        return y.sum()
    """
    fix = only_fix(src)
    assert fix.safe
    assert "y = torch.sigmoid(x * 2).clone()" in fixed(src)


def test_the_saved_input_is_cloned_when_the_write_is_in_the_same_statement():
    src = """
    import torch
    def f():
        x = torch.randn(4, 3, requires_grad=True)
        y = x.clone()
        y[1] = y[1] * y[0]
        return y.sum()
    """
    assert "y[1] = y[1].clone() * y[0].clone()" in fixed(src)


def test_under_no_grad_neither_rebinding_nor_a_clone_is_offered():
    """Rebinding under no_grad drops the graph; a clone where saved leaves the clamp hidden from autograd, so
    backward ignores it (torch: the gradient differs from `p.clamp(0.1, 0.9)`'s).  Neither is a repair."""
    src = """
    import torch
    def f():
        x = torch.randn(3, requires_grad=True)
        p = torch.sigmoid(x * 2)
        with torch.no_grad():
            p.clamp_(0.1, 0.9)
        return p.sum()
    """
    assert fixed(src) == textwrap.dedent(src)
    x = torch.tensor([3.0, 0.0, -3.0], requires_grad=True)
    p = torch.sigmoid(x * 2).clone()
    with torch.no_grad():
        p.clamp_(0.1, 0.9)
    hidden = torch.autograd.grad(p.sum(), x)[0]
    clamped = torch.autograd.grad(torch.sigmoid(x * 2).clamp(0.1, 0.9).sum(), x)[0]
    assert not torch.allclose(hidden, clamped)


def test_a_parameter_the_caller_holds_makes_rebinding_unsafe():
    src = """
    import torch
    def f(x: torch.Tensor):
        w = torch.randn(3, requires_grad=True)
        y = x * w
        x.add_(1)
        return y * x
    """
    fix = only_fix(src)
    assert not fix.safe and "parameter" in fix.title


def test_attribute_store_and_closure_are_escapes():
    attribute = """
    import torch
    class A:
        def f(self):
            x = torch.randn(3, requires_grad=True)
            h = torch.exp(x * 2)
            self.last = h
            h += 1
            return h
    """
    closure = """
    import torch
    def f():
        x = torch.randn(3, requires_grad=True)
        h = torch.exp(x * 2)
        get = lambda: h
        h += 1
        return h, get
    """
    for src in (attribute, closure):
        fix = only_fix(src)
        assert fix is not None and not fix.safe


def test_in_place_result_used_as_a_value():
    src = """
    import torch
    def f():
        x = torch.randn(3, requires_grad=True)
        s = torch.exp(x * 2)
        t = s * 3
        u = s.exp_()
        return t, u, s
    """
    assert "u = s = s.exp()" in fixed(src)


# ---------------------------------------------------------------------------- GG002/GG003
def test_parameter_update_goes_under_no_grad_with_the_files_torch_name():
    src = """
    import torch as th
    model = th.nn.Linear(2, 2)
    for p in model.parameters():
        p -= 0.1 * p.grad
    """
    out = fixed(src)
    assert "    with th.no_grad():\n        p -= 0.1 * p.grad\n" in out


def test_a_leaf_in_forward_is_computed_on_a_copy():
    src = """
    import torch
    import torch.nn as nn
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(3, 3))
        def forward(self, x):
            self.weight[0] = 0
            return x @ self.weight + self.weight.sum()
    """
    fix = only_fix(src)
    assert not fix.safe
    out = fixed(src, unsafe=True)
    assert "        weight = self.weight.clone()\n        weight[0] = 0\n        return x @ weight + weight.sum()" in out


# ---------------------------------------------------------------------------- GG004/GG005
def test_split_piece_written_inline_becomes_a_plain_slice():
    src = """
    import torch
    x = torch.randn(4, 3, requires_grad=True)
    h = x * 2
    h.split(2, dim=1)[1] += 1
    """
    assert "h[:, 2:4] += 1" in fixed(src)


def test_module_constructor_gets_inplace_false_where_it_is_reported():
    src = """
    import torch
    import torch.nn as nn
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.ReLU(inplace=True)
        def forward(self, x):
            h = torch.sigmoid(x)
            h = self.act(h)
            return h
    """
    (diag,) = analyse(src)
    assert diag.line == 7 and diag.fix.safe and diag.fix.edits[0].line == 7
    assert "self.act = nn.ReLU(inplace=False)" in fixed(src)


def test_inplace_false_positional_and_keyword():
    import libcst as cst
    from gradguard.fixes.inplace import inplace_false

    def run(code):
        return cst.Module(body=[]).code_for_node(inplace_false(cst.parse_expression(code)))

    assert run("nn.ReLU(True)") == "nn.ReLU(False)"
    assert run("F.relu(x, inplace = True)") == "F.relu(x, inplace = False)"


def test_module_applied_for_its_side_effect_is_unsafe_to_change():
    src = """
    import torch
    import torch.nn as nn
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.ReLU(inplace=True)
        def forward(self, x):
            h = torch.sigmoid(x)
            self.act(h)
            return h
    """
    fix = analyse(src)[0].fix
    assert fix is not None and not fix.safe and "dropped" in fix.title


def test_module_input_handed_to_a_helper_that_keeps_none_of_it_is_safe_to_change():
    """Who holds the input at the module's call is what the run saw there: a helper of the file that reads it and
    keeps a number is no escape (the code alone cannot tell it from one that keeps the tensor)."""
    src = """
    import torch
    import torch.nn as nn
    stats = []
    def log_stats(t):
        stats.append(float(t.mean()))
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.ReLU(inplace=True)
        def forward(self, x):
            h = torch.sigmoid(x)
            log_stats(h)
            h = self.act(h)
            return h
    def train():
        M()(torch.randn(3, requires_grad=True)).sum().backward()
    """
    fix = analyse(src)[0].fix
    assert fix is not None and fix.safe and "self.act = nn.ReLU(inplace=False)" in fixed(src)
    kept = src.replace("stats.append(float(t.mean()))", "stats.append(t)")
    fix = analyse(kept)[0].fix
    assert fix is not None and not fix.safe


# ---------------------------------------------------------------------------- costs and JSON
def test_libcst_runs_only_for_files_with_findings(monkeypatch):
    import libcst

    calls = []
    real = libcst.parse_module
    monkeypatch.setattr(libcst, "parse_module", lambda text, *a, **k: calls.append(1) or real(text, *a, **k))
    analyse("import torch\nx = torch.zeros(3)\nx += 1\ny = x * 2\n")  # in-place idiom, no finding
    assert calls == []
    analyse("import torch\nx = torch.zeros(3, requires_grad=True)\ny = x.exp()\ny += 1\ny.sum().backward()\n")
    assert calls == [1]


def test_json_carries_the_fix():
    diag = analyse("import torch\nx = torch.zeros(3, requires_grad=True)\ny = x.exp()\ny += 1\ny.sum().backward()\n")[0]
    data = json.loads(json.dumps(diag.to_json()))
    assert data["fix"]["safe"] is True
    assert data["fix"]["edits"] == [{"line": 4, "column": 3, "end_line": 4, "end_column": 5, "new_text": "= y +"}]


# ---------------------------------------------------------------------------- CLI
BUG = "import torch\nx = torch.randn(3, requires_grad=True)\ny = torch.sigmoid(x)\ny += 1  # note\ny.sum().backward()\n"
UNSAFE_ONLY = (
    "import torch\ndef f(x: torch.Tensor):\n    w = torch.randn(3, requires_grad=True)\n    y = x * w\n"
    "    x.add_(1)\n    return y * x\n"
)


def run_cli(capsys, *args):
    code = main(["check", "--no-jedi", "--jobs", "1", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_diff_prints_and_changes_nothing(tmp_path, capsys):
    path = tmp_path / "bug.py"
    path.write_text(BUG)
    code, out, err = run_cli(capsys, "--diff", str(path))
    assert path.read_text() == BUG
    assert code == 1
    assert "-y += 1  # note\n+y = y + 1  # note\n" in out and out.startswith("--- a/")
    assert err.strip().splitlines()[-1] == "Would fix 1 problem in 1 file; no problems would remain."


def test_fix_writes_and_a_second_fix_changes_nothing(tmp_path, capsys):
    path = tmp_path / "bug.py"
    path.write_text(BUG)
    code, _, err = run_cli(capsys, "--fix", str(path))
    assert code == 0 and err.strip().splitlines()[-1] == "Fixed 1 problem in 1 file; no problems remain."
    first = path.read_text()
    assert first == BUG.replace("y += 1", "y = y + 1")
    code, _, _ = run_cli(capsys, "--fix", str(path))
    assert path.read_text() == first and code == 0


def test_unsafe_fixes_are_applied_only_when_asked(tmp_path, capsys):
    path = tmp_path / "bug.py"
    path.write_text(UNSAFE_ONLY)
    code, _, err = run_cli(capsys, "--fix", str(path))
    assert path.read_text() == UNSAFE_ONLY and code == 1
    assert "(1 fixable with --unsafe-fixes)" in err
    code, _, _ = run_cli(capsys, "--fix", "--unsafe-fixes", str(path))
    assert "x = x.add(1)" in path.read_text() and code == 0


def test_a_fix_that_would_not_parse_leaves_the_file_untouched(tmp_path, capsys, monkeypatch):
    from gradguard.api import FIX_BUILDERS

    broken = lambda ctx, finding: Fix("break it", True, (TextEdit(4, 1, 4, 1, "(("),))  # noqa: E731
    monkeypatch.setitem(FIX_BUILDERS, "GG001", broken)
    path = tmp_path / "bug.py"
    path.write_text(BUG)
    _, _, err = run_cli(capsys, "--fix", str(path))
    assert path.read_text() == BUG
    assert "would not parse" in err and "left unchanged" in err


def test_fix_refuses_stdin(capsys):
    code, _, err = run_cli(capsys, "--fix", "-")
    assert code == 2 and "stdin" in err


@pytest.mark.fix_builder_crashes
def test_a_crashing_fix_builder_costs_only_the_fix(monkeypatch):
    from gradguard.api import FIX_BUILDERS

    def boom(ctx, finding):
        raise RuntimeError("bug")

    monkeypatch.setitem(FIX_BUILDERS, "GG001", boom)
    (diag,) = analyse(BUG)
    assert diag.code == "GG001" and diag.fix is None


# ---------------------------------------------------------------------------- the fixed snippets run
torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    "src",
    [
        # a view read later: clone where saved
        (
            "import torch\ndef f():\n    x = torch.randn(3, requires_grad=True)\n    y = torch.sigmoid(x * 2)\n"
            "    flat = y.view(-1)\n    flat.add_(1)\n    return y.sum()\n"
        ),
        # the save is in the written statement: clone the saved inputs
        (
            "import torch\ndef f():\n    x = torch.randn(4, 3, requires_grad=True)\n    y = x.clone()\n"
            "    y[1] = y[1] * y[0]\n    return y.sum()\n"
        ),
    ],
)
def test_fixed_snippets_run_and_keep_the_values(src):
    out = fix_text(src, "t.py", Config(jedi=False)).fixed
    assert out != src and not analyse(out)
    before, after = {}, {}
    exec(compile(src, "before", "exec"), before)  # noqa: S102 - our own test snippets
    exec(compile(out, "after", "exec"), after)  # noqa: S102
    torch.manual_seed(0)
    with torch.no_grad():
        expected = before["f"]()  # the original values (its backward is what raises)
    torch.manual_seed(0)
    got = after["f"]()
    got.backward()
    assert torch.allclose(got.detach(), expected)


def test_one_fix_per_function_per_pass_keeps_the_result_minimal():
    src = """
    import torch
    def f():
        x = torch.randn(3, requires_grad=True)
        y = torch.sigmoid(x)
        y.mul_(2.0)
        y[0] = 1
        y.sum().backward()
    """
    (finding,) = analyse(src)  # the second write on the same chain is a related line of the first's finding
    assert 7 in [r.line for r in finding.related]
    out = fixed(src)
    assert "y = y.mul(2.0)\n    y[0] = 1\n" in out and "clone" not in out  # the first fix settles the second


def test_a_tensor_an_attribute_also_holds_is_not_rebound_safely():
    src = """
    import torch
    class A:
        def __init__(self):
            self.buf = torch.ones(3)
            self.w = torch.randn(3, requires_grad=True)

        def f(self):
            h = self.buf
            y = h * self.w
            h += 1
            return y
    """
    import ast as _ast

    from gradguard.engine import analyze_module
    from gradguard.fixes.context import FixContext
    from gradguard.fixes.writes import InPlaceWrite

    text = textwrap.dedent(src)
    tree = _ast.parse(text)
    (finding,) = analyze_module(tree, "t.py", text.splitlines(), use_jedi=False)
    report = InPlaceWrite.of_mutation(FixContext(text, tree), finding.mutation).sharing(FixContext(text, tree), "h")
    assert not report.clean and "self" in report.reason()  # the run: `self` holds the written tensor
    assert "h = h + 1" not in fixed(src)


def test_a_number_read_and_used_elsewhere_than_arithmetic_is_kept_only_by_an_unsafe_fix():
    src = """
    import torch
    def f(log):
        gate = torch.randn((), requires_grad=True)
        w = torch.randn(3, requires_grad=True)
        alpha = float(torch.sigmoid(gate))
        log.append(alpha)
        loss = (alpha * w).sum()
        loss.backward()
    """
    fix = only_fix(src)
    assert fix is not None and not fix.safe and "other uses" in fix.title
    assert fixed(src) == textwrap.dedent(src)
    assert "alpha = torch.sigmoid(gate)" in fixed(src, unsafe=True)


def test_truncated_bptt_detaches_only_the_state_the_loop_carries():
    src = """
    import torch
    import torch.nn as nn
    def train():
        rnn, head = nn.GRU(3, 8), nn.Linear(8, 1)
        opt = torch.optim.SGD(list(rnn.parameters()) + list(head.parameters()), lr=0.1)
        xs, ys = torch.randn(6, 5, 2, 3), torch.randn(6, 5, 2, 1)
        h = torch.zeros(1, 2, 8)
        steps = 0
        for i in range(6):
            out, h = rnn(xs[i], h)
            loss = (head(out) - ys[i]).pow(2).mean()
            opt.zero_grad()
            loss.backward(retain_graph=True)
            opt.step()
            steps = steps + 1
        return steps
    """
    fix = only_fix(src)
    assert fix is not None and not fix.safe and "`h`" in fix.title and "`steps`" not in fix.title
    text = fixed(src, unsafe=True)
    assert "        h = h.detach()\n        out, h = rnn(xs[i], h)" in text and "loss.backward()" in text
    pytest.importorskip("torch")
    namespace: dict = {}
    exec(compile(text, "t.py", "exec"), namespace)
    assert namespace["train"]() == 6  # and torch no longer raises


# ---------------------------------------------------------------------------- GG108: hooks return a new gradient
_HOOK_PROGRAM = """
import torch
w = torch.randn(3, requires_grad=True)
h = w * 2
branch = h.exp()
{hook}
branch.register_hook(scale)
((h + branch) ** 2).sum().backward()
"""


def test_a_hook_writing_its_gradient_returns_a_new_one():
    out = fixed(_HOOK_PROGRAM.format(hook="def scale(g):\n    g[g > 1] = 0"))
    assert "def scale(g):\n    g = g.clone()\n    g[g > 1] = 0\n    return g\n" in out
    out = fixed(_HOOK_PROGRAM.format(hook="def scale(g):\n    g.mul_(0.5)\n    return g"))
    assert "    g = g.mul(0.5)\n    return g\n" in out


@pytest.mark.parametrize("hook, cloned", [
    ("def bump(t):\n    t.mul_(0.5)\ndef scale(g):\n    bump(g)",
     "def scale(g):\n    g = g.clone()\n    bump(g)\n    return g\n"),
    ("def scale(g):\n    a = g\n    a.mul_(0.5)\n    return g", "def scale(g):\n    g = g.clone()\n    a = g\n"),
    ("def scale(g):\n    kept.append(g)\n    g.mul_(0.5)", "def scale(g):\n    g = g.clone()\n    kept.append(g)\n"),
])
def test_a_hook_whose_gradient_a_helper_or_an_alias_writes_clones_it_first(hook, cloned):
    """The run tells which parameter of the function torch entered brought the gradient in: cloned there, every
    write in the hook or what it calls lands on the copy (and what the hook keeps holds the same values)."""
    src = "kept = []\n" + _HOOK_PROGRAM.format(hook=hook)
    out = fixed(src)
    assert cloned in out
    assert [d for d in analyse(out) if d.code == "GG108"] == []


def test_a_hook_returning_none_gets_no_fix():  # torch passes on the written gradient: a clone would drop the write
    src = _HOOK_PROGRAM.format(hook="def scale(g):\n    g.mul_(0.5)\n    return None")
    assert [d.fix for d in analyse(src) if d.code == "GG108"] == [None]


def test_a_hook_also_called_directly_gets_no_fix():
    src = _HOOK_PROGRAM.format(hook="def scale(g):\n    g.mul_(0.5)") + "scale(torch.ones(3))\n"
    assert [d.fix for d in analyse(src) if d.code == "GG108"] == [None]


# ---------------------------------------------------------------------------- GG107: the asked-for tensor keeps its name
_ASKED_PROGRAM = """
import torch
w = torch.randn(4, requires_grad=True)
h = w * 2
h.retain_grad()
aux = h.sum()
{write}
(aux + h.exp().sum()).backward()
print(h.grad)
"""


def test_a_write_after_retain_grad_goes_to_a_new_name_and_the_grad_stays_on_the_old():
    out = fixed(_ASKED_PROGRAM.format(write="h.mul_(3)"))
    assert "h_new = h.mul(3)\n(aux + h_new.exp().sum()).backward()\nprint(h.grad)\n" in out


def test_a_view_read_later_keeps_the_asked_write_unfixed():
    src = _ASKED_PROGRAM.format(write="v = h.view(2, 2)\nh.mul_(3)\nprint(v)")
    assert [d.fix for d in analyse(src) if d.code == "GG107"] == [None]


# ---------------------------------------------------------------------------- GG102: a hidden write the forward reads
_HIDDEN_PROGRAM = """
import torch
w = torch.randn(4, 3, requires_grad=True)
x = torch.randn(2, 4)
h = x @ w
{write}
loss = torch.tanh(h).sum()
loss.backward()
"""


@pytest.mark.parametrize("write, new", [
    ("h.data.mul_(0.5)", "h = h.mul(0.5)\n"),
    ("h.detach().clamp_(-1, 1)", "h = h.clamp(-1, 1)\n"),
    ("with torch.no_grad():\n    h[h > 1] = 0.0", "h = h.clone()\nh[h > 1] = 0.0\n"),
    ("with torch.inference_mode():\n    h *= 2", "h = h * 2\n"),
])
def test_a_hidden_write_the_forward_reads_goes_into_the_graph_as_an_unsafe_fix(write, new):
    src = _HIDDEN_PROGRAM.format(write=write)
    assert fixed(src) == textwrap.dedent(src)  # unsafe: only with --unsafe-fixes
    assert "\n" + new + "loss = " in fixed(src, unsafe=True)
    (fix,) = [d.fix for d in analyse(src) if d.code == "GG102"]
    assert "the gradient now goes through it" in fix.title


def test_a_hidden_write_through_a_view_read_later_is_not_put_in_the_graph():
    src = _HIDDEN_PROGRAM.format(write="v = h[0]\nh.data.mul_(0.5)\nprint(v)")
    assert [d.fix for d in analyse(src) if d.code == "GG102"] == [None]
