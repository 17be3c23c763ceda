"""Messages are templates with line references: built from nodes, moved by shifting, named at the output."""

from __future__ import annotations

import ast
import json

import pytest

from gradguard.api import analyze_source
from gradguard.config import Config
from gradguard.messages import Line, Message
from gradguard.api import analyze_notebook
from test_notebooks import notebook


def test_a_node_becomes_a_reference_to_its_line_and_text_stays_text():
    node = ast.parse("\n\ny = x * 2").body[0]
    message = Message.format("`{op}` on {saved} saved {label}", op="mul", saved=node, label="`d[{k}]`")
    assert message.parts == ("`mul` on ", Line(3), " saved `d[{k}]`")
    assert str(message) == "`mul` on line 3 saved `d[{k}]`"
    assert list(message.lines()) == [3]


def test_a_message_is_spliced_into_another_with_its_references():
    inner = Message.format("the backward on {sink} raises", sink=Line(9))
    outer = Message.format("{how} modifies it; {raises}.", how="`+=`", raises=inner)
    assert outer.parts == ("`+=` modifies it; the backward on ", Line(9), " raises.")


def test_moving_shifts_references_and_rendering_names_them():
    message = Message.format("saved on {a}, raises on {b}", a=Line(4), b=Line(10))
    moved = message.moved(lambda line: line + 2)
    assert str(moved) == "saved on line 6, raises on line 12"
    assert moved.render(lambda line: f"line {line - 5} of cell 2") == "saved on line 1 of cell 2, raises on line 7 of cell 2"
    assert str(Message.text("no line in line 4")) == "no line in line 4"  # plain text is never read for lines


def test_slots_take_no_format_spec():
    with pytest.raises(ValueError):
        Message.format("{n:>3}", n=1)


def test_a_call_path_note_names_notebook_cells():
    nb = notebook(
        ("code", "import torch\ndef scale_(t):\n    t.mul_(2)"),
        ("code", "w = torch.randn(3, requires_grad=True)\ny = torch.exp(w)\nscale_(y)\ny.sum().backward()"),
    )
    (d,) = analyze_notebook(json.dumps(nb), "nb.ipynb").diagnostics
    assert (d.code, d.cell, d.span.line) == ("GG001", 1, 3)
    assert "`torch.exp` on line 2 of cell 2" in d.message and "the backward on line 4 of cell 2" in d.message
    call = next(r for r in d.related if r.message.startswith("`scale_()`"))
    assert (call.cell, call.line) == (2, 3)
    assert call.message == "`scale_()` is called here; the write on line 3 of cell 1 happens inside it"


def test_an_optimizer_step_is_named_as_the_code_spells_it():
    source = """import torch


class Trainer:
    def __init__(self):
        self.w = torch.randn(4, 2, requires_grad=True)
        self.opt = torch.optim.SGD([self.w], lr=0.5)

    def step(self, x):
        self.opt.zero_grad()
        (x @ self.w).sum().backward()
        self.opt.step()
        with torch.no_grad():
            self.w = self.w.clamp(-1.0, 1.0)


trainer = Trainer()
for _ in range(3):
    trainer.step(torch.randn(3, 4))
"""
    (d,) = analyze_source(source, "trainer.py", Config(jedi=False)).diagnostics
    assert d.code == "GG109"
    assert "`self.opt.step()` on line 12" in d.message and "optimizer.step()" not in d.message


# --- the advice fits the situation (issue 29) ------------------------------------------------------------------
# Each program raises under torch; the rewrite the message advises runs clean, and gradguard finds nothing in it.

_HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\ndef train():\n    torch.manual_seed(0)\n"

_GAN = _HEAD + """\
    G = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6))
    D = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
    opt_G = torch.optim.SGD(G.parameters(), lr=0.1)
    opt_D = torch.optim.SGD(D.parameters(), lr=0.1)
    real, z = torch.randn(5, 6), torch.randn(5, 4)
    fake = G(z)
    d_fake = D(fake)
    loss_D = F.softplus(-D(real)).mean() + F.softplus(d_fake).mean()
    opt_D.zero_grad()
    loss_D.backward(retain_graph=True)
    opt_D.step()
    loss_G = F.softplus(-d_fake).mean()
    opt_G.zero_grad()
    loss_G.backward()
    opt_G.step()
"""
_TRUNK = _HEAD + """\
    trunk = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh())
    actor, critic = nn.Linear(16, 3), nn.Linear(16, 1)
    actor_opt = torch.optim.SGD(list(trunk.parameters()) + list(actor.parameters()), lr=0.1)
    critic_opt = torch.optim.SGD(list(trunk.parameters()) + list(critic.parameters()), lr=0.1)
    obs, returns = torch.randn(8, 6), torch.randn(8)
    feat = trunk(obs)
    value = critic(feat).squeeze(-1)
    log_probs = F.log_softmax(actor(feat), dim=-1)[:, 0]
    critic_loss = F.mse_loss(value, returns)
    actor_loss = -(log_probs * (returns - value).detach()).mean()
    critic_opt.zero_grad()
    critic_loss.backward(retain_graph=True)
    critic_opt.step()
    actor_opt.zero_grad()
    actor_loss.backward()
    actor_opt.step()
"""
_RECURRENT = _HEAD + """\
    cell, head = nn.GRUCell(3, 8), nn.Linear(8, 1)
    opt = torch.optim.SGD(list(cell.parameters()) + list(head.parameters()), lr=0.1)
    xs, ys = torch.randn(8, 4, 3), torch.randn(8, 4, 1)
    h = torch.zeros(4, 8)
    for start in range(0, 8, 4):
        loss = 0.0
        for t in range(start, start + 4):
            h = cell(xs[t], h)
            loss = loss + F.mse_loss(head(h), ys[t])
        opt.zero_grad()
        loss.backward(retain_graph=True)
        opt.step()
"""
_SECOND = _HEAD + """\
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    out = net(torch.randn(5, 4))
    opt.zero_grad()
    out[:, 0].sum().backward(retain_graph=True)
    opt.step()
    out[:, 1].sum().backward()
    opt.step()
"""
_GENERIC = _HEAD + """\
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    x = torch.randn(5, 4, requires_grad=True)
    y = net(x)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(0.99)
    y.sum().backward()
"""


def _rewritten(source: str, *replacements: tuple[str, str]) -> str:
    for old, new in replacements:
        assert old in source, old
        source = source.replace(old, new)
    return source


SITUATIONS = {  # name: (program, what its advice says, the program rewritten as advised)
    "gan": (_GAN, ["which a layer does only when its input requires grad", "a GAN's generated sample",
                   "compute `D(fake)` again after the step", "`D(fake.detach())`"],
            _rewritten(_GAN, ("d_fake = D(fake)", "d_fake = D(fake.detach())"),
                       ("loss_D.backward(retain_graph=True)", "loss_D.backward()"),
                       ("loss_G = F.softplus(-d_fake).mean()", "loss_G = F.softplus(-D(fake)).mean()"))),
    "actor-critic": (_TRUNK, ["this backward reads (saved on line 13)", "it does not (saved on line 14)",
                              "If the losses share a trunk",
                              "run every backward (or one backward of the losses' sum) before the step"],
                     _rewritten(_TRUNK, ("    critic_opt.step()\n    actor_opt.zero_grad()\n", ""),
                                ("    actor_opt.step()\n", "    critic_opt.step()\n    actor_opt.step()\n"),
                                ("    critic_opt.zero_grad()\n", "    critic_opt.zero_grad()\n    actor_opt.zero_grad()\n"))),
    "truncated-bptt": (_RECURRENT, ["`nn.GRUCell` built on line 15 in an earlier iteration", "truncated BPTT",
                                    "detach that state where each chunk begins"],
                       _rewritten(_RECURRENT, ("        loss = 0.0\n", "        h = h.detach()\n        loss = 0.0\n"),
                                  ("loss.backward(retain_graph=True)", "loss.backward()"))),
    "second-loss": (_SECOND, ["A backward ran before the step", "If this is a second loss",
                              "run every backward (or one backward of their sum) before the step"],
                    _rewritten(_SECOND, ("    out[:, 0].sum().backward(retain_graph=True)\n    opt.step()\n"
                                         "    out[:, 1].sum().backward()\n",
                                         "    (out[:, 0].sum() + out[:, 1].sum()).backward()\n"))),
    "unknown": (_GENERIC, ["Move the update after every backward that needs this graph, or compute the forward "
                           "again after the update."],
                _rewritten(_GENERIC, ("    y = net(x)\n", "    y = net(x)\n    y.sum().backward()\n"),
                           ("    y.sum().backward()\n", ""))),
}
_MARKERS = {"gan": "GAN", "actor-critic": "trunk", "truncated-bptt": "BPTT", "second-loss": "second loss"}


def _run(source: str) -> None:
    scope: dict = {}
    exec(compile(source, "<program>", "exec"), scope)
    scope["train"]()


@pytest.mark.parametrize("situation", SITUATIONS)
def test_gg101_advice_is_chosen_by_what_the_analysis_saw(situation):
    """A GAN's fake fed to D, an actor-critic's shared trunk, a recurrent state carried across steps, a second loss
    after a step; and, when the event tells none of these, the generic advice, never a guessed situation."""
    source, says, rewritten = SITUATIONS[situation]
    (diag,) = [d for d in analyze_source(source, "train.py").diagnostics if d.code == "GG101"]
    for phrase in says:
        assert phrase in diag.message, (phrase, diag.message)
    for other, marker in _MARKERS.items():
        assert (marker in diag.message) == (other == situation), (other, diag.message)
    assert "D(fake.detach())" not in diag.message or situation == "gan", diag.message
    assert analyze_source(rewritten, "train.py").diagnostics == []


@pytest.mark.parametrize("situation", SITUATIONS)
def test_gg101_advice_holds_under_torch(situation):
    torch = pytest.importorskip("torch")
    source, _, rewritten = SITUATIONS[situation]
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _run(source)
    _run(rewritten)  # the rewrite the message advises runs clean
    assert torch.is_grad_enabled()


# --- GG005 suggests only an argument the function takes (issue 29) -----------------------------------------------

_GG005 = """import torch
import torch.nn.functional as F


def f():
    w = torch.randn(3, requires_grad=True)
    y = torch.sigmoid(w)
    {call}
    y.sum().backward()
"""


@pytest.mark.parametrize("call, advice", [
    ("F.leaky_relu_(y, 0.1)", "Call the out-of-place `F.leaky_relu` instead (`leaky_relu_` takes no `inplace` argument)."),
    ("F.relu_(y)", "Call the out-of-place `F.relu` instead (`relu_` takes no `inplace` argument)."),
    ("torch.nn.functional.elu_(y)", "Call the out-of-place `torch.nn.functional.elu` instead"),
    ("F.relu(y, inplace=True)", "Pass `inplace=False` to `F.relu` (or drop the keyword)."),
    ("F.leaky_relu(y, 0.1, inplace=True)", "Pass `inplace=False` to `F.leaky_relu`"),
])
def test_gg005_suggests_only_an_argument_the_function_takes(call, advice):
    (diag,) = [d for d in analyze_source(_GG005.format(call=call), "f.py").diagnostics if d.code == "GG005"]
    assert advice in diag.message, diag.message
    if "inplace=True" not in call:
        assert "inplace=False" not in diag.message, diag.message


def test_gg005_advice_agrees_with_torch():
    """Which functions take ``inplace`` comes from the generated table (knowledge/torch_ops.json); torch agrees:
    each of them takes ``inplace=False``, and each trailing-underscore twin refuses it."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from gradguard.knowledge import load_knowledge

    knowledge = load_knowledge()
    assert {"relu", "leaky_relu", "elu"} <= knowledge.inplace_kwarg_functions
    for name in sorted(knowledge.inplace_kwarg_functions):
        args = (0.5, 0.0) if name == "threshold" else ()  # its threshold and value are required
        shape = {"dropout1d": (2, 3, 4), "dropout2d": (2, 3, 4, 4), "dropout3d": (2, 3, 4, 4, 4)}.get(name, (2, 3))
        getattr(F, name)(torch.rand(shape), *args, inplace=False)
        twin = getattr(F, name + "_", None)
        if twin is not None and knowledge.inplace_twin(name + "_") == name:
            with pytest.raises(TypeError, match="inplace"):
                twin(torch.rand(shape), *args, inplace=False)
    with pytest.raises(TypeError):
        torch.rand(3).relu_(inplace=False)


_LEAF_INPUT = _HEAD + """\
    net = nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(5, 4, requires_grad=True)
    out = net(x)
    out.sum().backward(retain_graph=True)
    opt.step()
    (out ** 2).sum().backward()
"""


def test_gg101_names_no_gan_it_cannot_see():
    """Every weight saved means only that the network's input requires grad; here it is a leaf, not a generator's
    output. The event does not record which, so the GAN advice is a condition, with the other branch beside it,
    and that branch's rewrite runs clean under torch."""
    (diag,) = [d for d in analyze_source(_LEAF_INPUT, "train.py").diagnostics if d.code == "GG101"]
    assert "If that input is another network's output (a GAN's generated sample" in diag.message, diag.message
    assert "if not, run every backward that needs this graph before the step" in diag.message, diag.message
    assert "carries the graph of" not in diag.message
    rewritten = _rewritten(_LEAF_INPUT, ("    out.sum().backward(retain_graph=True)\n    opt.step()\n"
                                         "    (out ** 2).sum().backward()\n",
                                         "    (out.sum() + (out ** 2).sum()).backward()\n    opt.step()\n"))
    assert analyze_source(rewritten, "train.py").diagnostics == []
    pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _run(_LEAF_INPUT)
    _run(rewritten)
