"""Fix forms only the probe's facts reach (issue 31 item 3), each proven by torch on programs of several shapes: every
program below is probed (``--entry run``), the finding of the form gets its fix from ``gradguard.probed_fixes``, and
the fixed program must run clean with the gradients of ``reference()`` (written as the author would fix it by hand).
The programs the form must refuse get no fix: its reason is in their comment."""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import pytest
from programs import assert_fix_proven, load_program

torch = pytest.importorskip("torch")

from gradguard.probe import ProbeOptions
from gradguard.probe.merge import diagnostics
from gradguard.probed_fixes import fixes_for

# --- a buffer whose rows hold values of several graphs, trained one after the other ------------------------------

# Rows written whole from an enumerate counter, a value of another shape broadcast into its row, rows read by index.
ROWS_WRITTEN_WHOLE = '''
import torch
import torch.nn as nn


def train(apart):
    torch.manual_seed(0)
    encoders = [nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4)) for _ in range(3)]
    opts = [torch.optim.SGD(e.parameters(), lr=0.1) for e in encoders]
    x, y = torch.randn(1, 3), torch.randn(3, 2, 4)
    if apart:
        codes = [enc(x).expand(2, 4) for enc in encoders]
    else:
        codes = x.new_zeros(3, 2, 4)
        for i, enc in enumerate(encoders):
            codes[i] = enc(x)
    grads = []
    for i, opt in enumerate(opts):
        opt.zero_grad()
        (codes[i] * y[i]).sum().backward(retain_graph=True)
        grads += [p.grad.clone() for p in encoders[i].parameters()]
        opt.step()
    return grads


def run():
    return train(False)


def reference():
    return train(True)
'''

# An object's buffer made in one method and filled element by element (`self.buf[i][t] = v`, `range` counters),
# read a row at a time in another method that steps each row's own network in turn.
ATTRIBUTE_FILLED_BY_ELEMENT = '''
import torch
import torch.nn as nn


class Agents:
    def __init__(self, apart):
        torch.manual_seed(0)
        self.apart = apart
        self.critics = [nn.Sequential(nn.Linear(2, 6), nn.ReLU(), nn.Linear(6, 1)) for _ in range(2)]
        self.opts = [torch.optim.Adam(c.parameters(), lr=1e-2) for c in self.critics]

    def rollout(self, states):
        self.scores = torch.zeros((2, 3, 1)).float()
        if self.apart:
            self.scores = [torch.zeros(3, 1) for _ in range(2)]
        for i in range(2):
            for t in range(3):
                self.scores[i][t] = self.critics[i](states[t])

    def update(self, targets):
        grads = []
        for i in range(2):
            self.opts[i].zero_grad()
            (targets[i] - self.scores[i]).pow(2).mean().backward(retain_graph=True)
            grads += [p.grad.clone() for p in self.critics[i].parameters()]
            self.opts[i].step()
        return grads


def _grads(apart):
    agents = Agents(apart)
    torch.manual_seed(1)
    agents.rollout(torch.randn(3, 1, 2))
    return agents.update(torch.randn(2, 3, 1))


def run():
    return _grads(False)


def reference():
    return _grads(True)
'''

# Refused: the buffer is also read as one tensor (`preds.mean(0)`), which a list of its rows is not.
BUFFER_READ_WHOLE = '''
import torch
import torch.nn as nn


def run():
    torch.manual_seed(0)
    heads = [nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)) for _ in range(2)]
    opts = [torch.optim.SGD(h.parameters(), lr=0.1) for h in heads]
    x = torch.randn(5, 3)
    preds = torch.zeros(2, 5, 1)
    for k, head in enumerate(heads):
        preds[k] = head(x)
    mean = preds.mean(0).detach()
    for k, opt in enumerate(opts):
        opt.zero_grad()
        (preds[k] - mean).pow(2).mean().backward(retain_graph=True)
        opt.step()
'''

# Refused: the name holds a list on another path the whole-row writes also run on (`preds = [None, None]`): copying into
# a row there would write into None.
BUFFER_OR_LIST_BEFORE_THE_WRITES = '''
import torch
import torch.nn as nn


def run(as_list=False):
    torch.manual_seed(0)
    heads = [nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)) for _ in range(2)]
    opts = [torch.optim.SGD(h.parameters(), lr=0.1) for h in heads]
    x = torch.randn(5, 3)
    preds = torch.zeros(2, 5, 1)
    if as_list:
        preds = [None, None]
    for k, head in enumerate(heads):
        preds[k] = head(x)
    for k, opt in enumerate(opts):
        opt.zero_grad()
        preds[k].pow(2).mean().backward(retain_graph=True)
        opt.step()
'''

# Refused: the buffer is filled along its second dimension (`out[:, i:i + 1]`), not by rows.
BUFFER_FILLED_BY_COLUMNS = '''
import torch
import torch.nn as nn


def run():
    torch.manual_seed(0)
    heads = [nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)) for _ in range(2)]
    opts = [torch.optim.SGD(h.parameters(), lr=0.1) for h in heads]
    x = torch.randn(5, 3)
    out = torch.zeros(5, 2)
    for i, head in enumerate(heads):
        out[:, i:i + 1] = head(x)
    for i, opt in enumerate(opts):
        opt.zero_grad()
        out[:, i].pow(2).mean().backward(retain_graph=True)
        opt.step()
'''


# --- a loss another optimizer applies, scored on a value from before the first optimizer's step ------------------

# A GAN in one function: the discriminator's loss reuses `D(fake)` of the generator's loss, after the generator's step.
DISCRIMINATOR_AFTER_GENERATOR_STEP = '''
import torch
import torch.nn as nn


def train(detached):
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 4))
    D = nn.Sequential(nn.Linear(4, 5), nn.LeakyReLU(0.2), nn.Linear(5, 1))
    opt_g = torch.optim.SGD(G.parameters(), lr=0.1)
    opt_d = torch.optim.Adam(D.parameters(), lr=1e-2)
    real, noise = torch.randn(6, 4), torch.randn(6, 3)
    fake = G(noise)
    d_fake = D(fake)
    opt_g.zero_grad()
    (-d_fake.mean()).backward(retain_graph=True)
    opt_g.step()
    if detached:
        d_fake = D(fake.detach())
    d_loss = d_fake.mean() - D(real).mean()
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
    return [p.grad for p in D.parameters()] + [p.detach().clone() for p in D.parameters()]


def run():
    return train(False)


def reference():
    return train(True)
'''

# An object's update: the encoder's step, a fresh forward of the encoder on other data, then the critic's loss on the
# critic's score of the code from before the step (a critic with a frozen bias: only what requires grad is asked).
CRITIC_AFTER_ENCODER_STEP_IN_METHOD = '''
import torch
import torch.nn as nn


class Trainer:
    def __init__(self, detached):
        torch.manual_seed(0)
        self.detached = detached
        self.enc = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2))
        self.critic = nn.Sequential(nn.Linear(2, 6), nn.ReLU(), nn.Linear(6, 1))
        self.critic[0].bias.requires_grad_(False)
        self.enc_opt = torch.optim.Adam(self.enc.parameters(), lr=1e-2)
        self.critic_opt = torch.optim.SGD(self.critic.parameters(), lr=0.1)

    def step(self, x1, x2):
        code = self.enc(x1)
        score = self.critic(code)
        enc_loss = code.pow(2).mean() + score.mean()
        self.enc_opt.zero_grad()
        enc_loss.backward(retain_graph=True)
        self.enc_opt.step()
        other = self.critic(self.enc(x2).detach())
        if self.detached:
            score = self.critic(code.detach())
        critic_loss = (score - other).pow(2).mean()
        self.critic_opt.zero_grad()
        critic_loss.backward(retain_graph=True)
        self.critic_opt.step()
        return [p.grad for p in self.critic.parameters()]


def _run(detached):
    trainer = Trainer(detached)
    torch.manual_seed(1)
    grads = trainer.step(torch.randn(4, 5), torch.randn(4, 5))
    return grads + [p.detach().clone() for p in [*trainer.enc.parameters(), *trainer.critic.parameters()]]


def run():
    return _run(False)


def reference():
    return _run(True)
'''

# Refused: the stepped network reads the other network's output (`A(C(x))`): backward into C's parameters alone would
# still run through A's graph, whose weights the step changed.
STEPPED_NETWORK_FED_BY_THE_OTHER = '''
import torch
import torch.nn as nn


def run():
    torch.manual_seed(0)
    C = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
    A = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2))
    opt_a = torch.optim.SGD(A.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(C.parameters(), lr=0.1)
    x = torch.randn(6, 3)
    out = A(C(x))
    score = out.sum(1)
    opt_a.zero_grad()
    out.mean().backward(retain_graph=True)
    opt_a.step()
    c_loss = score.pow(2).mean()
    opt_c.zero_grad()
    c_loss.backward()
    opt_c.step()
'''

# --- a value computed once before a loop whose every iteration steps the weights its graph saved ------------------

# Shared features before a loop over heads, each optimizer stepping the trunk too: the probe names the use of the
# features after the first step.
FEATURES_BEFORE_HEAD_STEPS = '''
import torch
import torch.nn as nn


def _setup():
    torch.manual_seed(0)
    trunk = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 6))
    heads = [nn.Linear(6, 1) for _ in range(3)]
    opts = [torch.optim.SGD([*trunk.parameters(), *h.parameters()], lr=0.1) for h in heads]
    return trunk, heads, opts, torch.randn(5, 4), torch.randn(3, 5, 1)


def run():
    trunk, heads, opts, x, ys = _setup()
    feats = trunk(x)
    for k, (head, opt) in enumerate(zip(heads, opts)):
        opt.zero_grad()
        loss = (head(feats) - ys[k]).pow(2).mean()
        loss.backward(retain_graph=True)
        opt.step()
    return [p.grad for p in trunk.parameters()]


def reference():
    trunk, heads, opts, x, ys = _setup()
    for k, (head, opt) in enumerate(zip(heads, opts)):
        feats = trunk(x)
        opt.zero_grad()
        loss = (head(feats) - ys[k]).pow(2).mean()
        loss.backward(retain_graph=True)
        opt.step()
    return [p.grad for p in trunk.parameters()]
'''

# A method computes the codes through another method of the object, then a `while` loop takes inner steps on them:
# the probe places the finding at the use, the step as its note.
CODES_BEFORE_INNER_STEPS = '''
import torch
import torch.nn as nn


class Learner:
    def __init__(self):
        torch.manual_seed(0)
        self.encoder = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 4))
        self.head = nn.Linear(4, 2)
        self.opt = torch.optim.Adam([*self.encoder.parameters(), *self.head.parameters()], lr=1e-2)

    def embed(self, batch):
        return self.encoder(batch) * 2.0

    def inner_steps(self, batch, targets, n):
        codes = self.embed(batch)
        k = 0
        while k < n:
            self.opt.zero_grad()
            (self.head(codes) - targets[k]).abs().mean().backward(retain_graph=True)
            self.opt.step()
            k += 1
        return [p.grad for p in self.encoder.parameters()]

    def inner_steps_fresh(self, batch, targets, n):
        k = 0
        while k < n:
            codes = self.embed(batch)
            self.opt.zero_grad()
            (self.head(codes) - targets[k]).abs().mean().backward(retain_graph=True)
            self.opt.step()
            k += 1
        return [p.grad for p in self.encoder.parameters()]


def _data():
    torch.manual_seed(1)
    return torch.randn(6, 3), torch.randn(3, 6, 2)


def run():
    return Learner().inner_steps(*_data(), 3)


def reference():
    return Learner().inner_steps_fresh(*_data(), 3)
'''

# Refused: the features are read again after the loop (computed in it, they would be the last iteration's).
FEATURES_READ_AFTER_THE_LOOP = FEATURES_BEFORE_HEAD_STEPS.replace(
    "    return [p.grad for p in trunk.parameters()]\n\n\ndef reference",
    "    return [p.grad for p in trunk.parameters()] + [feats]\n\n\ndef reference", 1)

# Refused: the loop changes the input the features are computed from (computed in it, they would differ).
INPUT_CHANGED_IN_THE_LOOP = FEATURES_BEFORE_HEAD_STEPS.replace(
    "        opt.step()\n    return [p.grad for p in trunk.parameters()]\n\n\ndef reference",
    "        opt.step()\n        x = x * 0.5\n    return [p.grad for p in trunk.parameters()]\n\n\ndef reference", 1)

# Refused: the statement before the loop only scales features another statement computed (the saves are there):
# computing it in the loop alone would still read the graph from before the steps.
FEATURES_SCALED_APART = FEATURES_BEFORE_HEAD_STEPS.replace(
    "    feats = trunk(x)\n    for", "    raw = trunk(x)\n    feats = raw * 2.0\n    for", 1)

# Refused: the features are computed from a batch drawn by another call (`next(batches)`): computed in the loop, each
# iteration would draw a new batch.
FEATURES_OF_A_DRAWN_BATCH = FEATURES_BEFORE_HEAD_STEPS.replace(
    "    feats = trunk(x)\n    for", "    batches = iter([x, x + 1.0])\n    feats = trunk(next(batches))\n    for", 1)


# --- graphs a method stores on the object, stale after the steps of an update that backpropagates them later -------

# An autoencoder-GAN update in the style of pix2pix/DRIT: `forward()` stores its outputs on the object, the update
# steps both networks after the first loss's backward, then a second method backpropagates a loss on the stored
# sample.  The probe reports the encoder's step (the run ended with its graph alive) and the call.
ATTRIBUTES_STALE_AFTER_STEPS = '''
import torch
import torch.nn as nn


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.enc = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
        self.gen = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 6))
        self.critic = nn.Linear(6, 1)
        self.enc_opt = torch.optim.SGD(self.enc.parameters(), lr=0.1)
        self.gen_opt = torch.optim.SGD(self.gen.parameters(), lr=0.1)

    def forward(self):
        self.code = self.enc(self.real)
        self.recon = self.gen(self.code)
        self.sample = self.gen(self.code * 0.5)

    def backward_recon(self):
        (self.recon - self.real).pow(2).mean().backward(retain_graph=True)

    def backward_sample(self):
        self.critic(self.sample).mean().backward()

    def update(self):
        self.enc_opt.zero_grad()
        self.gen_opt.zero_grad()
        self.backward_recon()
        self.enc_opt.step()
        self.gen_opt.step()
        self.gen_opt.zero_grad()
        self.backward_sample()
        self.gen_opt.step()
        return [p.grad for p in self.gen.parameters()]

    def update_again(self):
        self.enc_opt.zero_grad()
        self.gen_opt.zero_grad()
        self.backward_recon()
        self.enc_opt.step()
        self.gen_opt.step()
        self.gen_opt.zero_grad()
        self.forward()
        self.backward_sample()
        self.gen_opt.step()
        return [p.grad for p in self.gen.parameters()]


def _grads(again):
    model = Pair()
    torch.manual_seed(1)
    model.real = torch.randn(4, 6)
    model.forward()
    return model.update_again() if again else model.update()


def run():
    return _grads(False)


def reference():
    return _grads(True)
'''

# The same with the saves in a method the forward calls (`self.encode(...)`), one optimizer, the first backward inline.
SAVES_IN_A_METHOD_THE_FORWARD_CALLS = '''
import torch
import torch.nn as nn


class Model:
    def __init__(self):
        torch.manual_seed(0)
        self.enc = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
        self.dec = nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 4))
        self.opt = torch.optim.Adam([*self.enc.parameters(), *self.dec.parameters()], lr=1e-2)

    def encode(self, x):
        return self.enc(x) * 0.5

    def forward(self):
        self.z = self.encode(self.x)
        self.rec = self.dec(self.z)

    def backward_prior(self):
        self.z.pow(2).mean().backward()

    def step(self):
        self.opt.zero_grad()
        (self.rec - self.x).abs().mean().backward(retain_graph=True)
        self.opt.step()
        self.opt.zero_grad()
        self.backward_prior()
        return [p.grad for p in self.enc.parameters()]

    def step_again(self):
        self.opt.zero_grad()
        (self.rec - self.x).abs().mean().backward(retain_graph=True)
        self.opt.step()
        self.opt.zero_grad()
        self.forward()
        self.backward_prior()
        return [p.grad for p in self.enc.parameters()]


def _grads(again):
    m = Model()
    torch.manual_seed(1)
    m.x = torch.randn(5, 4)
    m.forward()
    return m.step_again() if again else m.step()


def run():
    return _grads(False)


def reference():
    return _grads(True)
'''

# Refused: the method that made the graphs takes an input (`forward(x)`): which one to pass again is not the fix's
# to say.
FORWARD_TAKES_AN_INPUT = SAVES_IN_A_METHOD_THE_FORWARD_CALLS.replace(
    "    def forward(self):\n        self.z = self.encode(self.x)", "    def forward(self, x):\n        self.z = self.encode(x)"
).replace("self.forward()", "self.forward(self.x)").replace("m.forward()", "m.forward(m.x)")


def _probed(source: str, worker, tmp_path: Path):
    """The program's text, path and probe findings (it must raise as the bug does), with their fixes."""
    path = tmp_path / "program.py"
    text = textwrap.dedent(source)
    path.write_text(text, encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            load_program(path).run()
    result = worker.probe(path, ProbeOptions(entry="run", timeout=60))
    found = [d for d in diagnostics(result, str(path)) if d.path == str(path)]
    return text, path, found, fixes_for(text, str(path), found)


@pytest.mark.parametrize("source", [ROWS_WRITTEN_WHOLE, ATTRIBUTE_FILLED_BY_ELEMENT],
                         ids=["rows_written_whole", "attribute_filled_by_element"])
def test_buffer_rows_kept_apart_is_proven(source: str, worker, tmp_path: Path):
    text, path, found, fixes = _probed(source, worker, tmp_path)
    titles = [fix.title for fix in fixes.values()]
    assert [t for t in titles if t.startswith("Keep the buffer's rows in separate tensors")], \
        ([(d.code, d.line, d.message) for d in found], titles)
    # the advice the message gives must hold too: a stacked list links the graphs again (torch raises)
    said = [d.message for d in found if "into part of a buffer" in d.message]
    assert said and not any("then torch.stack" in m for m in said), said
    assert_fix_proven(text, path, [e for fix in fixes.values() for e in fix.edits], tmp_path / "fixed.py")


@pytest.mark.parametrize("source", [BUFFER_READ_WHOLE, BUFFER_OR_LIST_BEFORE_THE_WRITES, BUFFER_FILLED_BY_COLUMNS],
                         ids=["buffer_read_whole", "buffer_or_list_before_the_writes", "buffer_filled_by_columns"])
def test_buffer_rows_not_kept_apart_when_used_otherwise(source: str, worker, tmp_path: Path):
    _, _, found, fixes = _probed(source, worker, tmp_path)
    assert any("part of a buffer" in d.message for d in found), [(d.code, d.line, d.message) for d in found]
    assert not [f.title for f in fixes.values() if f.title.startswith("Keep the buffer's rows")]



@pytest.mark.parametrize("source", [DISCRIMINATOR_AFTER_GENERATOR_STEP, CRITIC_AFTER_ENCODER_STEP_IN_METHOD],
                         ids=["discriminator_after_generator_step", "critic_after_encoder_step_in_method"])
def test_backward_into_the_next_steps_parameters_is_proven(source: str, worker, tmp_path: Path):
    text, path, found, fixes = _probed(source, worker, tmp_path)
    titles = [fix.title for fix in fixes.values()]
    assert [t for t in titles if t.startswith("Backpropagate only into the parameters")], \
        ([(d.code, d.line, d.message) for d in found], titles)
    assert_fix_proven(text, path, [e for fix in fixes.values() for e in fix.edits], tmp_path / "fixed.py")


def test_backward_not_narrowed_when_the_stepped_network_reads_the_other(worker, tmp_path: Path):
    _, _, found, fixes = _probed(STEPPED_NETWORK_FED_BY_THE_OTHER, worker, tmp_path)
    assert any(d.code == "GG101" for d in found), [(d.code, d.line, d.message) for d in found]
    assert not [f.title for f in fixes.values() if f.title.startswith("Backpropagate only into")]


@pytest.mark.parametrize("source", [FEATURES_BEFORE_HEAD_STEPS, CODES_BEFORE_INNER_STEPS],
                         ids=["features_before_head_steps", "codes_before_inner_steps"])
def test_forward_in_the_loop_that_steps_is_proven(source: str, worker, tmp_path: Path):
    text, path, found, fixes = _probed(source, worker, tmp_path)
    titles = [fix.title for fix in fixes.values()]
    assert [t for t in titles if " in the loop, before each backward" in t], \
        ([(d.code, d.line, d.message) for d in found], titles)
    assert_fix_proven(text, path, [e for fix in fixes.values() for e in fix.edits], tmp_path / "fixed.py")


@pytest.mark.parametrize("source", [FEATURES_READ_AFTER_THE_LOOP, INPUT_CHANGED_IN_THE_LOOP, FEATURES_SCALED_APART,
                                    FEATURES_OF_A_DRAWN_BATCH],
                         ids=["features_read_after_the_loop", "input_changed_in_the_loop", "features_scaled_apart",
                              "features_of_a_drawn_batch"])
def test_forward_not_moved_into_the_loop_when_it_would_differ(source: str, worker, tmp_path: Path):
    assert source not in (FEATURES_BEFORE_HEAD_STEPS,)  # the variant was made
    _, _, found, fixes = _probed(source, worker, tmp_path)
    assert any(d.code == "GG101" for d in found), [(d.code, d.line, d.message) for d in found]
    assert not [f.title for f in fixes.values() if " in the loop, before each backward" in f.title]


@pytest.mark.parametrize("source", [ATTRIBUTES_STALE_AFTER_STEPS, SAVES_IN_A_METHOD_THE_FORWARD_CALLS],
                         ids=["attributes_stale_after_steps", "saves_in_a_method_the_forward_calls"])
def test_method_called_again_after_the_steps_is_proven(source: str, worker, tmp_path: Path):
    text, path, found, fixes = _probed(source, worker, tmp_path)
    titles = [fix.title for fix in fixes.values()]
    assert [t for t in titles if t.startswith("Call `self.forward()` again after the step")], \
        ([(d.code, d.line, d.message) for d in found], titles)
    for n, fix in enumerate(fixes.values()):  # each fix alone makes the program run clean
        assert_fix_proven(text, path, list(fix.edits), tmp_path / f"fixed_{n}.py")


def test_method_not_called_again_when_it_takes_an_input(worker, tmp_path: Path):
    assert FORWARD_TAKES_AN_INPUT != SAVES_IN_A_METHOD_THE_FORWARD_CALLS  # the variant was made
    _, _, found, fixes = _probed(FORWARD_TAKES_AN_INPUT, worker, tmp_path)
    assert any(d.code == "GG101" for d in found), [(d.code, d.line, d.message) for d in found]
    assert not [f.title for f in fixes.values() if " again after the step" in f.title]
