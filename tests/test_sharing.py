"""The run log (``inference/sharing.py``): what the code reads after a write, as the interpreter ran it."""

from __future__ import annotations

import ast
import textwrap

import pytest
from gradguard.engine import analyze_module
from gradguard.fixes.context import CannotFix, FixContext
from gradguard.fixes.writes import InPlaceWrite
from gradguard.rules import gg103_graph_break
from variants import fix_proof

SETUP = """\
import torch
def use(y):
    n = y * 2
    return n
w = torch.ones(3, requires_grad=True)
y = w.exp()
loss = y.sum()
"""


def moment_of_write(body: str):
    """The moment of the one GG001 write (``y.add_(1)``) in SETUP + body."""
    text = SETUP + textwrap.dedent(body)
    findings = analyze_module(ast.parse(text), "<test>", text.splitlines(), use_jedi=False)
    (finding,) = [f for f in findings if f.code == "GG001"]
    return finding.mutation.moment


@pytest.mark.parametrize("body, read", [
    ("y.add_(1)\nz = y * 2\nloss.backward()\n", True),  # read by name
    ("y.add_(1)\nz = [0, y][1]\nloss.backward()\n", True),  # read into a list
    ("y.add_(1)\nn = y.shape\nloss.backward()\n", False),  # metadata only
    ("y.add_(1)\nprint(y.grad, y.dtype)\nloss.backward()\n", False),
    ("y.add_(1)\nother = use(w)\nloss.backward()\n", False),  # `y` of the followed call is another variable
    ("z = y * 1\ny.add_(1)\nloss.backward()\n", False),  # read before only
    ("debug = False\ny.add_(1)\nif debug:\n    print(y.sum())\nloss.backward()\n", True),  # a branch left out may run
    ("y.add_(1)\nwhile loss.item() > y.sum().item():\n    break\nloss.backward()\n", True),  # a loop's test
])
def test_value_read_after_the_write(body, read):
    moment = moment_of_write(body)
    assert moment.value_read_after("y") is read


def test_metadata_reads_are_kept_apart():
    moment = moment_of_write("y.add_(1)\nn = y.shape\nloss.backward()\n")
    assert moment.log.metadata_read(moment.frames[-1], "y", moment.position)
    assert not moment.value_read_after("y")


@pytest.mark.parametrize("body, read", [
    ("y.add_(1)\nshow = lambda: y.sum()\nloss.backward()\nshown = show()\n", True),  # a lambda's body, as it runs
    ("y.add_(1)\ndef show():\n    return y.sum()\nloss.backward()\nshown = show()\n", True),
    ("y.add_(1)\nshow = lambda: w.sum()\nloss.backward()\nshown = show()\n", False),
])
def test_reads_of_a_name_by_the_functions_a_frame_runs(body, read):
    moment = moment_of_write(body)
    assert moment.log.read_in_other_frames(moment.frames[-1], "y", moment.position) is read


def test_a_loop_around_the_write_counts_its_earlier_reads_as_after():
    text = textwrap.dedent("""\
        import torch
        w = torch.ones(3, requires_grad=True)
        y = w.exp()
        for _ in range(3):
            z = y * 2
            y.add_(1)
            z.sum().backward()
        """)
    findings = analyze_module(ast.parse(text), "<test>", text.splitlines(), use_jedi=False)
    (finding,) = [f for f in findings if f.code == "GG001"]
    moment = finding.mutation.moment
    assert moment.value_read_after("y")  # `z = y * 2` of the next iteration
    assert moment.value_read_after("z")


LOOP = """\
import torch
w = torch.ones(3, requires_grad=True)
y = w.exp()
for k in range(3):
{body}
    z.sum().backward()
"""


@pytest.mark.parametrize("body, read", [
    # bound afresh at the top of each iteration: the next iteration reads the new value
    ("y = w.exp()\nz = y * 2\ny.add_(1)", False),
    ("y = w.exp()\nif k >= 0:\n    z = y * 2\n    y.add_(1)", False),
    ("y = w.exp()\nz = y * 2\nif k > 0:\n    y.add_(1)\n    print(k)", False),
    ("y = w.exp()\nz = y * 2\ny.add_(1)\ny = w.exp()\nn = y * 2", False),
    ("y, s = w.exp(), 1\nz = y * 2\ny.add_(1)", False),
    ("z = y * 2\ny.add_(1)\ny = w.exp()", True),  # bound after the read: the next iteration reads the old one
    ("if k > 1:\n    y = w.exp()\nz = y * 2\ny.add_(1)", True),  # bound only in a branch
    ("y = w.exp()\nz = y * 2\ny.add_(1)\nif k > 1:\n    y = w.exp()\nn = y * 2", True),
    ("y = w.exp()\nz = y * 2\ny.add_(1)\ny = y * 3", True),  # the assignment reads it first
    ("y = w.exp()\nz = y * 2\ny.add_(1)\nwhile y.sum() > 0:\n    y = w.exp()\n    break", True),  # its test
    ("y = w.exp()\nz = y * 2\nfor _ in range(2):\n    y.add_(1)\n    n = y * 2", True),  # an inner loop
    ("y = w.exp()\nz = y * 2\nfor _ in range(2):\n    y.add_(1)\n    y = w.exp()", True),
    ("y = w.exp()\nz = y * 2\ntry:\n    y.add_(1)\n    y = w.exp()\nexcept ValueError:\n    pass\nn = y * 2",
     True),  # left part-way, the `try` does not bind
])
def test_an_assignment_ends_the_reads_of_the_value_a_name_held(body, read):
    text = LOOP.format(body=textwrap.indent(body, "    "))
    findings = analyze_module(ast.parse(text), "<test>", text.splitlines(), use_jedi=False)
    (finding,) = [f for f in findings if f.code == "GG001"]
    assert finding.mutation.moment.value_read_after("y") is read


@pytest.mark.parametrize("body, read", [
    ("ys = [w.exp()]\nz = ys[0] * 2\nys[0].add_(1)", False),  # a list made afresh in each iteration
    ("ys = {'y': w.exp()}\nz = ys['y'] * 2\nys['y'].add_(1)", False),
    ("ys = []\nys.append(w.exp())\nz = ys[0] * 2\nys[0].add_(1)", False),
    ("ys = [w.exp()]\nz = ys[0] * 2\nys[0].add_(1)\nprint(len(ys))", True),
    ("if k == 0:\n    ys = [w.exp()]\nz = ys[0] * 2\nys[0].add_(1)", True),  # kept from the first iteration
])
def test_a_container_made_afresh_is_not_read_after(body, read):
    text = LOOP.format(body=textwrap.indent(body, "    "))
    findings = analyze_module(ast.parse(text), "<test>", text.splitlines(), use_jedi=False)
    (finding,) = [f for f in findings if f.code == "GG001"]
    assert finding.mutation.moment.value_read_after("ys") is read


@pytest.mark.parametrize("key", [f"GG103/pos_detach_in_place_state_already_used::{t}"
                                 for t in ("container_list", "container_dict", "container_iter")])
def test_a_detach_through_a_container_made_afresh_in_each_iteration_is_fixed(key):
    fix_proof.assert_proven(key)  # `h = h_list[0].detach()`: the next iteration's list holds the new `h`


def test_a_write_inside_a_followed_call_asks_about_the_callers_frame_by_depth():
    text = textwrap.dedent("""\
        import torch
        def bump(t):
            t.add_(1)
            return None
        w = torch.ones(3, requires_grad=True)
        y = w.exp()
        loss = y.sum()
        bump(y)
        k = y + 1
        loss.backward()
        """)
    findings = analyze_module(ast.parse(text), "<test>", text.splitlines(), use_jedi=False)
    (finding,) = [f for f in findings if f.code == "GG001"]
    moment = finding.mutation.moment
    assert len(moment.frames) == 2
    assert not moment.value_read_after("t")  # the helper reads `t` no more after its write
    assert moment.value_read_after("y", depth=0)  # the caller reads `y` after the call


# ---- who holds the tensor at a `.detach_()` (``Moment.holders``), and the GG103 fix that asks it ----------------
DETACH = """\
import torch
import torch.nn as nn


def keep(t):
    return None


def run():
    torch.manual_seed(0)
    net = nn.Linear(4, 3)
    scores = net(torch.randn(6, 4))
{body}
    loss = (scores - anchor[:, None]).pow(2).mean()
    loss.backward()
    return [p.grad for p in net.parameters()]
"""


def detach_finding(body: str):
    text = DETACH.format(body=textwrap.indent(textwrap.dedent(body), "    "))
    tree = ast.parse(text)
    (finding,) = [f for f in analyze_module(tree, "<test>", text.splitlines(), use_jedi=False)
                  if f.code == "GG103" and f.data.get("detach")]
    return text, tree, finding


def detach_fix(body: str):
    text, tree, finding = detach_finding(body)
    try:
        return gg103_graph_break.fix(FixContext(text, tree, "<test>"), finding)
    except CannotFix:
        return None


def test_a_view_held_only_by_its_name_is_detached_out_of_place():
    _, _, finding = detach_finding("anchor = scores[:, 0]\nanchor.detach_()\n")
    moment = finding.mutation.moment
    assert {("anchor", "same"), ("scores", "view")} <= set(moment.held())
    assert not moment.escaped
    fix = detach_fix("anchor = scores[:, 0]\nanchor.detach_()\n")
    assert fix is not None and fix.safe and fix.edits[0].new_text == "anchor = anchor.detach()"


@pytest.mark.parametrize("body, text", [
    ("anchor = scores[:, 0]\nalias = anchor\ncurrent = alias\ncurrent.detach_()\n",
     "current = anchor = current.detach()"),  # `alias` is not read after: left as it is
    ("anchor = scores[:, 0]\nalias = anchor\nalias.detach_()\nanchor = alias\n", "alias = alias.detach()"),
    ("anchor = scores[:, 0]\nrows = [anchor]\nrows[0].detach_()\n", "anchor = rows[0].detach()"),
    ("anchor = scores[:, 0]\nstate = {'a': [anchor]}\nstate['a'][0].detach_()\n", "anchor = state['a'][0].detach()"),
])
def test_every_name_read_after_that_holds_the_tensor_is_rebound(body, text):
    fix = detach_fix(body)
    assert fix is not None and fix.safe and fix.edits[0].new_text == text


@pytest.mark.parametrize("body, why", [
    ("anchor = scores[:, 0]\nrows = [anchor]\nanchor.detach_()\nn = len(rows)\n", "a list read later"),
    ("anchor = scores[:, 0]\nstate = {'a': [anchor]}\nanchor.detach_()\nkept = state\n", "a dict of lists"),
    ("anchor = scores[:, 0]\nalias = anchor\ndef show():\n    return alias.sum()\nanchor.detach_()\nshown = show()\n",
     "a nested function reading a name left as it is"),
    ("anchor = scores[:, 0]\nalias = anchor\nshow = lambda: alias.sum()\nanchor.detach_()\nshown = show()\n",
     "a lambda reading a name left as it is"),
    ("anchor = scores[:, 0]\nnet.last = anchor\nanchor.detach_()\n", "an object"),
    ("anchor = scores[:, 0]\nregistry = __import__('collections').deque()\nregistry.append(anchor)\n"
     "anchor.detach_()\n", "handed to a call the analysis cannot see into"),
])
def test_no_rebinding_where_something_else_holds_the_tensor(body, why):
    assert detach_fix(body) is None, why


def test_no_rebinding_of_a_free_variable_or_of_what_a_caller_passed():
    text = textwrap.dedent("""\
        import torch


        def outer(scores):
            anchor = scores[:, 0]

            def inner():
                anchor.detach_()

            inner()
            return anchor


        def helper(view):
            view.detach_()
            return 0


        def run():
            scores = torch.randn(6, 3, requires_grad=True) * 2
            helper(scores[:, 0])
            return outer(scores)
        """)
    tree = ast.parse(text)
    found = [f for f in analyze_module(tree, "<test>", text.splitlines(), use_jedi=False)
             if f.code == "GG103" and f.data.get("detach")]
    assert found
    for finding in found:
        with pytest.raises(CannotFix):
            gg103_graph_break.fix(FixContext(text, tree, "<test>"), finding)


def moment_of(text: str, code: str = "GG001"):
    text = textwrap.dedent(text)
    findings = analyze_module(ast.parse(text), "<test>", text.splitlines(), use_jedi=False)
    (finding,) = [f for f in findings if f.code == code]
    return finding.mutation.moment


@pytest.mark.parametrize("split", ["qkv.chunk(3, dim=-1)", "qkv.unbind(-1)", "qkv.split(1, dim=-1)",
                                   "torch.chunk(qkv, 3, -1)", "qkv"])
def test_sibling_pieces_of_a_split_hold_none_of_the_written_elements(split):
    # torch: chunk/split/unbind (and iterating a tensor) cut disjoint regions (test_pieces_are_disjoint_under_torch)
    moment = moment_of(f"""\
        import torch
        def f(x):
            qkv = torch.sigmoid(x.reshape(2, 3))
            q, k, v = {split}
            q.mul_(2)
            return q + k + v
        f(torch.ones(6, requires_grad=True)).sum().backward()
        """, "GG004")
    held = {name for name, how in moment.held()}
    assert {"q", "qkv"} <= held and not held & {"k", "v"}


@pytest.mark.parametrize("second", ["parts[0]", "parts[-1]", "parts[i]", "x.chunk(3)[1]"])
def test_a_piece_that_may_be_the_written_one_holds_it(second):
    # the same index, an index that may be any piece, another split of the same memory
    moment = moment_of(f"""\
        import torch
        def f(x, i):
            x = torch.sigmoid(x)
            parts = x.chunk(3)
            a = parts[0]
            b = {second}
            a.mul_(2)
            return a + b
        f(torch.ones(6, requires_grad=True), 1).sum().backward()
        """, "GG004")
    assert {("b", "view"), ("b", "tensor"), ("b", "same")} & set(moment.held())


def test_joined_pieces_may_be_either():
    moment = moment_of("""\
        import torch
        def f(x, c):
            q, k = torch.sigmoid(x).chunk(2)
            p = q if c else k
            q.mul_(2)
            return p + q
        f(torch.ones(6, requires_grad=True), True).sum().backward()
        """, "GG004")
    assert "p" in {name for name, _ in moment.held()}


def test_the_units_parameters_are_the_callers():
    moment = moment_of("""\
        import torch
        import torch.nn as nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(1, 2, 3)
            def forward(self, x, y):
                v = x.view(-1)
                feats = self.conv(x)
                v.clamp_(0, 1)
                return feats.sum() + y.sum()
        """)
    assert moment.parameters == (("x",),)
    fresh = moment_of("""\
        import torch
        import torch.nn as nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(1, 2, 3)
            def forward(self, x):
                x = x * 2
                feats = self.conv(x)
                x.clamp_(0, 1)
                return feats.sum()
        """)
    assert fresh.parameters == ((),)  # rebound before: the write is to a tensor of its own
    assert "feats" not in {name for name, _ in fresh.held()}  # a conv's output is new memory


def test_a_followed_calls_parameter_and_its_callers_variables():
    moment = moment_of("""\
        import torch
        def bump(t, n):
            t.add_(n)
        w = torch.ones(3, requires_grad=True)
        y = w.exp()
        outs = [y]
        loss = y.sum()
        bump(y, 1)
        loss.backward()
        """)
    assert moment.parameters == ((), ("t",))
    assert set(moment.held(0)) == {("y", "same"), ("outs", "holder")}
    assert moment.held() == [("t", "same")]
    assert moment.held_outside() == [("outs", 0), ("y", 0)]  # the module's: the caller's frame


@pytest.mark.parametrize("holder", ["outs = [y]", "outs = {'y': y}", "outs = []\nouts.append(y)",
                                    "outs = (w, [y])"])
def test_containers_built_before_the_write_hold_it(holder):
    moment = moment_of_write(f"{holder}\ny.add_(1)\nloss.backward()\n")
    assert ("outs", "holder") in moment.held()


def test_pieces_are_disjoint_under_torch():
    """The fact ``Tensor.piece`` stands on: each sequence-of-views op cuts regions that share no element."""
    import torch
    from gradguard.knowledge.names import SEQUENCE_VIEWS
    x = torch.arange(24.0).reshape(4, 6)
    args = {"chunk": (2,), "split": (2,), "split_with_sizes": ([1, 3],), "tensor_split": (2,), "unbind": (),
            "hsplit": (2,), "vsplit": (2,), "dsplit": (2,)}
    assert set(args) == SEQUENCE_VIEWS
    for name, extra in args.items():
        base = x.reshape(2, 2, 6) if name == "dsplit" else x
        pieces = getattr(base, name)(*extra)
        spans = [{p.storage_offset() + sum(i * s for i, s in zip(idx, p.stride()))
                  for idx in torch.cartesian_prod(*(torch.arange(n) for n in p.shape)).reshape(-1, p.dim()).tolist()}
                 for p in pieces]
        for i, a in enumerate(spans):
            for b in spans[i + 1:]:
                assert not a & b, name


def test_an_item_of_a_parameter_taken_for_one_tensor_is_the_callers():
    """``inputs[0]`` of an unannotated forward argument may be an item of the caller's tuple: a write to it writes
    what the caller holds (RunLog.reached_through), as for a view of the argument."""
    moment = moment_of("""\
        import torch.nn as nn
        class TwoPass(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(5, 2)
            def forward(self, inputs, fill):
                feats = inputs[0]
                first = self.lin(feats)
                feats[:, -1] = fill
                return first + self.lin(feats)
        """)
    assert moment.parameters == (("inputs",),)


def test_the_fixes_ask_the_run_who_sees_the_write():
    """The rebinding's report is the run's (aliases.from_run): a module's output is new memory, so `first` holds
    nothing of `x` (the code alone took `self.lin(x)` for a call that may keep its argument), and the caller's
    hold comes from the parameter the run saw bring the memory in."""
    text = textwrap.dedent("""\
        import torch.nn as nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(5, 5)
            def forward(self, inputs):
                x = inputs[0]
                h = self.lin(x)
                first = self.lin(h)
                h.clamp_(0, 1)
                return first + self.lin(h) + self.lin(x)
        """)
    tree = ast.parse(text)
    (finding,) = [f for f in analyze_module(tree, "<test>", text.splitlines(), use_jedi=False) if f.code == "GG001"]
    ctx = FixContext(text, tree, "<test>")
    write = InPlaceWrite.of_mutation(ctx, finding.mutation)
    report = write.sharing(ctx, "h")
    assert report.clean, report.reason()
    other = moment_of(text.replace("h.clamp_(0, 1)", "x.clamp_(0, 1)").replace(" + self.lin(x)", ""))
    assert other.callers_pass() == ["inputs"]


_PIECES_SUMMED = """\
    import torch
    import torch.nn as nn
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
        def forward(self, x, heads):
            adjs = [a.squeeze(1) for a in torch.split(self.lin(x), 1, dim=1)]
            adj = None
            for i in range(heads):
                if adj is None:
                    adj = adjs[i]
                else:
                    adj += adjs[i]
            return RETURNED
    """


@pytest.mark.parametrize("returned, blocks", [("adj", False), ("adj, adjs[0]", True)])
def test_a_list_the_written_tensor_was_read_out_of_counts_as_a_view_if_read_again(returned, blocks):
    """`adj = adjs[0]` then `adj += adjs[i]` in a counter loop: the list is where the tensor lives, so rebinding
    `adj` leaves its element unwritten (a real case, 235, was once fixed into a copy that still failed).  That matters
    only if the element is read again: read only as `adjs[i]` by the loop's `range` counter, each later read is
    another piece (``fixes.writes.pieces_read_by_counter``) and the rebinding is offered; read after the loop
    (`adjs[0]`), the list holds the written tensor as a view would, and none is."""
    text = textwrap.dedent(_PIECES_SUMMED).replace("RETURNED", returned)
    tree = ast.parse(text)
    findings = [f for f in analyze_module(tree, "<test>", text.splitlines(), use_jedi=False) if f.code == "GG004"]
    assert findings
    ctx = FixContext(text, tree, "<test>")
    write = InPlaceWrite.of_mutation(ctx, findings[0].mutation)
    assert write.moment is not None and write.moment.holders is not None
    report = write.sharing(ctx, "adj")
    assert (report.aliases_read_after == ["adjs"]) is blocks, report.reason()


LAYER = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.scale = nn.Parameter(torch.ones(3))
def helper(m):
    m.fc.weight[0] = 0
def run():
    block = Block()
    x = torch.randn(2, 3)
"""


def _taken_after(body: str, code: str = "GG003") -> list[str] | None:
    """What frame 0 (``run``) takes of the written memory's values after the write, as source text."""
    text = LAYER + textwrap.indent(textwrap.dedent(body), "    ")
    findings = analyze_module(ast.parse(text), "<test>", text.splitlines(), use_jedi=False)
    (finding,) = [f for f in findings if f.code == code]
    moment = finding.mutation.moment
    taken = moment.values_taken_after(0)
    return None if taken is None else sorted(ast.unparse(n) for n in taken)


@pytest.mark.parametrize("body, taken", [
    ("helper(block)\ny = F.linear(x, block.fc.weight)\nreturn y.sum()\n", ["block.fc.weight"]),
    ("helper(block)\ny = block.fc(x)\nreturn y.sum()\n", ["block.fc(x)"]),  # a layer's own weight
    ("helper(block)\ny = block.fc.weight.t() @ x.t()\nreturn y.sum()\n", ["block.fc.weight", "block.fc.weight.t()"]),
    ("helper(block)\nn = block.fc.weight.shape\nreturn x.sum()\n", []),  # metadata only
    ("helper(block)\ny = block.scale * x\nreturn y.sum()\n", []),  # another parameter
    ("helper(block)\nprint(block.fc.weight)\nreturn x.sum()\n", ["print(block.fc.weight)"]),
    ("w = block.fc.weight\nhelper(block)\nreturn w\n", ["return w"]),  # returned as it is
    ("helper(block)\nfor _ in range(2):\n    y = x * 2\nreturn y.sum()\n", None),  # a loop may run again
])
def test_what_takes_the_written_memorys_values_after_the_write(body, taken):
    """The run log keeps every op's operand, layer call, unknown call and return that takes the written memory
    after the write, by the node of frame 0 (a read in a call it follows: by that call)."""
    assert _taken_after(body) == taken
