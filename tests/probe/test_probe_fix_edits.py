"""The probe-only fixes that are edits no rule's builder makes (``gradguard.probed_fixes.EDITS``): clearing the
gradients before a backward that adds to ones a step already applied, removing the assignment that replaces a loaded
copy by the trained module, keeping a clone of the output a forward hook keeps, unpacking clones of the pieces of a
split handed to code that writes one in place, and computing with grad mode on (``torch.enable_grad()``) the
statement of a ``no_grad`` block that makes a loss term, and dropping a ``requires_grad`` write's guard on the flag
itself, a copy of an object's state at the op that saved it before the object's method wrote it in place, and a step
moved after the call of a helper that only runs a backward, an optimizer made after the call that replaces the
model's layers instead of before it, batch norm handed its input's own statistics detached rewritten to normalise
with them attached, and (through GG103's own builder) a ``training_step`` that returns nothing returning its loss.
Each program is probed (``--entry run``); a positive's fix is applied and torch proves it (``run()`` of the fixed
copy runs clean and gives ``reference()``'s gradients); a negative's finding is real but gets no fix (the edit would
be wrong there)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from programs import assert_fix_proven

torch = pytest.importorskip("torch")

from gradguard.probe import ProbeOptions
from gradguard.probe.merge import diagnostics
from gradguard.probed_fixes import fixes_for

# Module-level names, `torch.autograd.backward`, the backward in a nested block of the loop.
STALE_GRADS_IN_NESTED_LOOP = '''
import torch
import torch.nn as nn

def fit(clear):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    optim = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    grads = []
    for epoch in range(2):
        for x in [torch.randn(5, 3) for _ in range(2)]:
            if clear:
                net.zero_grad()
            out = net(x).pow(2).mean()
            torch.autograd.backward(out)
            grads += [p.grad.clone() for p in net.parameters()]
            optim.step()
    return grads

def run():
    return fit(False)

def reference():
    return fit(True)
'''

# Two losses meant to add up before one step: the fix goes before the first, not between them.
STALE_GRADS_TWO_LOSSES = '''
import torch
import torch.nn as nn

class Trainer:
    def __init__(self, clear):
        torch.manual_seed(0)
        self.model = nn.Linear(4, 2)
        self.opts = {"main": torch.optim.Adam(self.model.parameters(), lr=1e-2)}
        self.opt = self.opts["main"]
        self.clear = clear

    def step(self, x):
        if self.clear:
            self.model.zero_grad()
        a = self.model(x).sum()
        a.backward()
        b = self.model(x * 2).pow(2).mean()
        b.backward()
        grads = [p.grad.clone() for p in self.model.parameters()]
        self.opt.step()
        return grads

def run_(clear):
    t = Trainer(clear)
    torch.manual_seed(1)
    return [g for _ in range(3) for g in t.step(torch.randn(3, 4))]

def run():
    return run_(False)

def reference():
    return run_(True)
'''

# The loaded copy replaced by the trained module in a block with other statements: the line goes, they stay.
SYNCED_THEN_ALIASED_AMONG_OTHERS = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

class Learner:
    def __init__(self):
        torch.manual_seed(0)
        self.online = nn.Linear(3, 1)
        self.frozen = nn.Linear(3, 1)
        self.opt = torch.optim.SGD(self.online.parameters(), lr=0.3)
        self.syncs = 0

    def sync(self, alias):
        self.frozen.load_state_dict(self.online.state_dict())
        if alias:
            self.frozen = self.online
            self.syncs += 1
        else:
            self.syncs += 1

    def update(self, x):
        with torch.no_grad():
            target = self.frozen(x) * 0.5
        loss = F.mse_loss(self.online(x), target)
        self.opt.zero_grad()
        loss.backward()
        grads = [p.grad.clone() for p in self.online.parameters()]
        self.opt.step()
        return grads

def train(alias):
    learner = Learner()
    learner.sync(alias)
    torch.manual_seed(1)
    return [g for _ in range(3) for g in learner.update(torch.randn(4, 3))]

def run():
    return train(True)

def reference():
    return train(False)
'''

# Gradients accumulated over two batches, the step under a condition, never cleared: clearing them before the
# backward would undo the accumulation (where zero_grad goes is not one edit before the backward).
ACCUMULATED_STEP_UNDER_CONDITION = '''
import torch
import torch.nn as nn

def run():
    torch.manual_seed(0)
    net = nn.Linear(3, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for i, x in enumerate([torch.randn(4, 3) for _ in range(6)]):
        net(x).pow(2).mean().backward()
        if i % 2 == 1:
            opt.step()
    return [p.grad for p in net.parameters()]
'''

# The optimizer is rebound in the loop: the name before the backward is not the optimizer whose step applies them.
OPTIMIZER_REBOUND_IN_BLOCK = '''
import torch
import torch.nn as nn

def run():
    torch.manual_seed(0)
    net = nn.Linear(3, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for x in [torch.randn(4, 3) for _ in range(3)]:
        net(x).pow(2).mean().backward()
        opt.step()
        opt = torch.optim.SGD(net.parameters(), lr=0.1) if x.sum() > 100 else opt
    return [p.grad for p in net.parameters()]
'''

# A hook made by a function, storing into a dict by the module's name; an in-place activation after each layer.
HOOK_STORES_OUTPUT_IN_DICT = '''
import torch
import torch.nn as nn

def grads(clone):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.LeakyReLU(0.1, inplace=True), nn.Linear(6, 3), nn.ReLU(inplace=True))
    feats = {}

    def hook_for(name):
        def hook(mod, inp, out):
            feats[name] = out.clone() if clone else out
        return hook

    def plain(mod, inp, out):
        feats[mod] = out

    for name, layer in net.named_children():
        if isinstance(layer, nn.Linear):
            layer.register_forward_hook(hook_for(name) if clone else plain)
    x = torch.randn(5, 4, requires_grad=True)
    net(x)
    sum((f - 0.2).pow(2).sum() for f in feats.values()).backward()
    return [x.grad]

def run():
    return grads(False)

def reference():
    return grads(True)
'''

# The hook keeps its output twice: one clone would leave the other overwritten.
HOOK_KEEPS_OUTPUT_TWICE = '''
import torch
import torch.nn as nn

first, every = [], []

def keep(module, inputs, output):
    if not first:
        first.append(output)
    every.append(output)

def run():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(inplace=True))
    net[0].register_forward_hook(keep)
    x = torch.randn(5, 4, requires_grad=True)
    net(x)
    sum(f.pow(2).sum() for f in every).backward()
    return [x.grad]
'''

# `torch.chunk` of a module's output, a piece handed to a helper method that writes it in place.
CHUNKS_OF_OUTPUT_SCALED_BY_METHOD = '''
import torch
import torch.nn as nn

class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 6)

    def squash(self, g):
        g.sigmoid_()
        return g

    def forward(self, x, fixed):
        if fixed:
            a, b = (c.clone() for c in torch.chunk(self.lin(x), 2, dim=1))
        else:
            a, b = torch.chunk(self.lin(x), 2, dim=1)
        return self.squash(a) * b

def grads(fixed):
    torch.manual_seed(0)
    gate = Gate()
    gate(torch.randn(3, 4), fixed).pow(2).sum().backward()
    return [gate.lin.weight.grad, gate.lin.bias.grad]

def run():
    return grads(False)

def reference():
    return grads(True)
'''

# The pieces of a named tensor: the writes may be meant to change it (read again below), so no clone is offered.
PIECES_OF_NAMED_TENSOR = '''
import torch
import torch.nn as nn

def center_(t):
    t.sub_(t.mean())

def run():
    torch.manual_seed(0)
    lin = nn.Linear(4, 6)
    h = lin(torch.randn(3, 4))
    first, second = h.split(3, dim=1)
    center_(first)
    h.sum().backward()
    return [lin.weight.grad]
'''

# A distillation term in a method, its statement written over two lines inside a `with torch.no_grad():` block
# that also computes the teacher's targets (which stay without a graph).
DEAD_TERM_IN_NO_GRAD_BLOCK_OF_METHOD = '''  # probe: GG103
import torch
import torch.nn as nn
import torch.nn.functional as F

class Distiller:
    def __init__(self):
        torch.manual_seed(0)
        self.student, self.teacher = nn.Linear(4, 3), nn.Linear(4, 3)
        self.proj = nn.Linear(3, 3)

    def loss(self, x, fixed):
        s = self.student(x)
        with torch.no_grad():
            t = self.teacher(x).softmax(-1)
            if fixed:
                with torch.enable_grad():
                    aligned = (self.proj(s)
                               .log_softmax(-1))
            else:
                aligned = (self.proj(s)
                           .log_softmax(-1))
        return F.mse_loss(s, t) + F.kl_div(aligned, t, reduction="batchmean")

def grads(fixed):
    d = Distiller()
    d.loss(torch.randn(5, 4), fixed).backward()
    return [p.grad for m in (d.student, d.proj) for p in m.parameters()] + [d.teacher.weight.grad]

def run():
    return grads(False)

def reference():
    return grads(True)
'''

# The loss of each batch computed inside a logging block of a loop; the block binds another name read only there.
LOSS_IN_NO_GRAD_BLOCK_OF_LOOP = '''  # probe: GG103
import torch
import torch.nn as nn

def fit(fixed):
    torch.manual_seed(0)
    net = nn.Linear(3, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    seen = []
    for x in [torch.randn(4, 3) for _ in range(3)]:
        opt.zero_grad()
        if fixed:
            scale = 2.0
            loss = (net(x) * scale).pow(2).mean()
        else:
            with torch.no_grad():
                scale = 2.0
                loss = (net(x) * 2.0).pow(2).mean()
        loss.backward()
        seen += [p.grad.clone() for p in net.parameters()]
        opt.step()
    return seen

def run():
    return fit(False)

def reference():
    return fit(True)
'''

# The loss reads a value the block computed before it: that value may be the one that needs a graph (here it is).
LOSS_IN_NO_GRAD_BLOCK_FROM_ITS_FEATURES = '''  # probe: GG103
import torch
import torch.nn as nn

def run():
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    with torch.no_grad():
        h = net(x)
        loss = h.pow(2).mean()
    loss.backward()
    return [p.grad for p in net.parameters()]
'''

# The dead term is computed by a helper called inside the block: grad mode on around the call reaches the helper.
DEAD_TERM_FROM_HELPER_CALLED_IN_BLOCK = '''  # probe: GG103
import torch
import torch.nn as nn

def term(net, h):
    return net(h).pow(2).mean()

def grads(fixed):
    torch.manual_seed(0)
    enc, head = nn.Linear(3, 4), nn.Linear(4, 1)
    h = enc(torch.randn(5, 3))
    with torch.no_grad():
        if fixed:
            with torch.enable_grad():
                extra = term(head, h)
        else:
            extra = term(head, h)
    (h.pow(2).mean() + extra).backward()
    return [p.grad for m in (enc, head) for p in m.parameters()]

def run():
    return grads(False)

def reference():
    return grads(True)
'''

# The term's statement is written on the block's own line: there is no line of its own to put in a block.
DEAD_TERM_ON_THE_BLOCK_LINE = '''  # probe: GG103
import torch
import torch.nn as nn

def run():
    torch.manual_seed(0)
    enc, head = nn.Linear(3, 4), nn.Linear(4, 1)
    h = enc(torch.randn(5, 3))
    with torch.no_grad(): extra = head(h).pow(2).mean()
    (h.pow(2).mean() + extra).backward()
    return [p.grad for p in enc.parameters()]
'''

# A method's guard around two statements, one of them `requires_grad_`: the body stays, one level out.
GUARDED_TOGGLE_OF_TWO_STATEMENTS = '''  # probe: GG103
import torch
import torch.nn as nn

class Finetuner:
    def __init__(self, guarded):
        torch.manual_seed(0)
        self.body, self.head = nn.Linear(4, 6), nn.Linear(6, 1)
        self.guarded, self.toggled = guarded, 0

    def set_body(self, on):
        for name, p in self.body.named_parameters():
            if self.guarded:
                if p.requires_grad:
                    p.requires_grad_(on)
                    self.toggled += 1
            else:
                p.requires_grad_(on)
                self.toggled += 1

    def grads(self):
        x = torch.randn(5, 4)
        self.set_body(False)
        self.head(self.body(x)).pow(2).mean().backward()
        self.set_body(True)
        self.head(self.body(x)).pow(2).mean().backward()
        return [p.grad for p in self.body.parameters()]

def run():
    return Finetuner(True).grads()

def reference():
    return Finetuner(False).grads()
'''

# The guard also skips a bias frozen for good elsewhere: dropping it would unfreeze that one too.
GUARD_ALSO_SKIPS_FROZEN_ELSEWHERE = '''  # probe: GG103
import torch
import torch.nn as nn

def toggle(module, on):
    for p in module.parameters():
        if p.requires_grad:
            p.requires_grad = on

def run():
    torch.manual_seed(0)
    backbone, head = nn.Linear(5, 8), nn.Linear(8, 1)
    backbone.bias.requires_grad = False  # kept frozen on purpose
    x = torch.randn(6, 5)
    toggle(backbone, False)
    head(backbone(x)).pow(2).mean().backward()
    toggle(backbone, True)
    head(backbone(x)).pow(2).mean().backward()
    return [backbone.weight.grad]
'''

# A state read through a property, multiplied by a matrix product; the setter method writes it with `mul_`.
STATE_PROPERTY_READ_THEN_SCALED_BY_SETTER = '''  # probe: GG001
import torch
import torch.nn as nn

class Memory:
    def __init__(self, n):
        self._buf = torch.ones(n, n)

    @property
    def value(self):
        return self._buf

    def decay(self, by):
        with torch.no_grad():
            self._buf.mul_(by)

class Mixer(nn.Module):
    def __init__(self, n, copy):
        super().__init__()
        self.lin, self.memory, self.copy = nn.Linear(n, n), Memory(n), copy

    def forward(self, x):
        mem = self.memory.value.clone() if self.copy else self.memory.value
        out = torch.matmul(self.lin(x), mem)
        self.memory.decay(0.5)
        return out

def grads(copy):
    torch.manual_seed(0)
    m = Mixer(3, copy)
    m(torch.randn(2, 3)).pow(2).sum().backward()
    return [m.lin.weight.grad]

def run():
    return grads(False)

def reference():
    return grads(True)
'''

# The op takes the state twice: a copy of one read would leave the other saved.
STATE_READ_TWICE_BY_THE_OP = '''  # probe: GG001
import torch
import torch.nn as nn

class Holder:
    def __init__(self, value):
        self.buf = value

    def get(self):
        return self.buf

    def set(self, value):
        with torch.no_grad():
            self.buf[:] = value

class Decay(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.gate = nn.Linear(n, n)
        self.state = Holder(torch.ones(2, n))

    def forward(self, x):
        held = self.state.get()
        out = torch.sigmoid(self.gate(x)) * held * held
        self.state.set(out.detach())
        return out

def run():
    torch.manual_seed(0)
    layer = Decay(3)
    layer(torch.randn(2, 3)).sum().backward()
    return [layer.gate.weight.grad]
'''

# A trainer method steps, then calls a method whose one statement is a second backward through the kept features.
STEP_BEFORE_HELPER_BACKWARD_OF_KEPT_FEATURES = '''
import torch
import torch.nn as nn

class Trainer:
    def __init__(self, fixed):
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.5)
        self.fixed = fixed

    def penalty(self):
        self.out.abs().mean().backward()

    def encode(self, x):
        self.out = self.net(x)

    def fit(self):
        self.opt.zero_grad()
        self.out.pow(2).mean().backward(retain_graph=True)
        if self.fixed:
            self.penalty()
            self.opt.step()
        else:
            self.opt.step()
            self.penalty()
        return [p.grad.clone() for p in self.net.parameters()]

def grads(fixed):
    trainer = Trainer(fixed)
    trainer.encode(torch.randn(4, 3))
    return trainer.fit()

def run():
    return grads(False)

def reference():
    return grads(True)
'''

# The helper runs a fresh forward before its backward: moved after it, the step would leave that forward on the old
# weights.
STEP_BEFORE_HELPER_WITH_FRESH_FORWARD = '''
import torch
import torch.nn as nn

class Trainer:
    def __init__(self):
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def penalty(self):
        fresh = self.net(torch.ones(1, 3)).sum()
        (self.out.abs().mean() + fresh).backward()

    def encode(self, x):
        self.out = self.net(x)

    def fit(self):
        self.opt.zero_grad()
        self.out.pow(2).mean().backward(retain_graph=True)
        self.opt.step()
        self.penalty()
        return [p.grad for p in self.net.parameters()]

def run():
    trainer = Trainer()
    trainer.encode(torch.randn(4, 3))
    return trainer.fit()
'''

# The optimizer made (its parameters given by keyword) before a helper gives the model wider layers.
OPTIMIZER_BEFORE_HELPER_WIDENS_LAYERS = '''
# probe: GG103
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(3, 5)
        self.head = nn.Linear(5, 1)

    def forward(self, x):
        return self.head(torch.tanh(self.body(x)))

def widen(net, width):
    net.body = nn.Linear(3, width)
    net.head = nn.Linear(width, 1)

def fit(fixed):
    torch.manual_seed(0)
    net = Net()
    if fixed:
        widen(net, 8)
        opt = torch.optim.Adam(params=net.parameters(), lr=1e-2)
    else:
        opt = torch.optim.Adam(params=net.parameters(), lr=1e-2)
        widen(net, 8)
    grads = []
    for _ in range(2):
        opt.zero_grad()
        net(torch.randn(4, 3)).pow(2).mean().backward()
        opt.step()
        grads += [p.grad for group in opt.param_groups for p in group["params"]]
    return grads

def run():
    return fit(False)

def reference():
    return fit(True)
'''

# The optimizer takes a list of the parameters made before it: made after the helper, it would take
# the same old tensors.
OPTIMIZER_OF_LIST_MADE_BEFORE_HELPER = '''
# probe: GG103
import torch
import torch.nn as nn

def widen(model):
    model[0] = nn.Linear(3, 8)
    model[2] = nn.Linear(8, 1)

def run():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.1)
    widen(model)
    model(torch.randn(4, 3)).pow(2).mean().backward()
    return [p.grad for p in params]
'''

# A scheduler takes the optimizer between it and the helper's call: moving the optimizer below the
# call would leave the scheduler's line reading a name not yet bound.
SCHEDULER_BETWEEN_OPTIMIZER_AND_HELPER = '''
# probe: GG103
import torch
import torch.nn as nn

def widen(model):
    model[0] = nn.Linear(3, 8)
    model[2] = nn.Linear(8, 1)

def run():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    widen(model)
    model(torch.randn(4, 3)).pow(2).mean().backward()
    opt.step()
    sched.step()
    return [p.grad for group in opt.param_groups for p in group["params"]]
'''

# Batch norm of conv features by their own (unbiased) statistics, detached, no weight, eps left out.
BATCH_NORM_OF_OWN_DETACHED_STATS = '''
# probe: GG103
import torch
import torch.nn.functional as F

def normalise(x, fused):
    mean = x.mean(dim=(0, 2, 3))
    var = x.var(dim=(0, 2, 3))
    if fused:
        return F.batch_norm(x, mean.detach(), var.detach())
    return (x - mean[None, :, None, None]) / torch.sqrt(var[None, :, None, None] + 1e-5)

def grads(fused):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(2, 3, 3, padding=1)
    h = torch.relu(normalise(conv(torch.randn(4, 2, 5, 5)), fused))
    h.pow(2).mean().backward()
    return [p.grad for p in conv.parameters()]

def run():
    return grads(True)

def reference():
    return grads(False)
'''

# The same call with its `training` flag a value, False in this run: the rewrite would change what the call does
# when it is True (batch statistics, running statistics updated).
BATCH_NORM_TRAINING_FLAG_A_VALUE = '''
# probe: GG103
import torch
import torch.nn.functional as F

def run(training=False):
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 4)
    h = lin(torch.randn(6, 3))
    mean, var = h.mean(0), h.var(0, unbiased=False)
    out = F.batch_norm(h, mean.detach(), var.detach(), training=training)
    out.pow(2).mean().backward()
    return [p.grad for p in lin.parameters()]
'''

# A training_step that computes its loss, then logs in a loop, and returns nothing: `return loss` at its end.
TRAINING_STEP_ENDS_IN_LOOP = '''
# probe: GG103
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 3)
        self.seen = []

    def training_step(self, batch, batch_idx):
        out = self.body(batch)
        loss = out.pow(2).mean()
        for value in out.detach().mean(0):
            self.seen.append(float(value))

class NetReturning(Net):
    def training_step(self, batch, batch_idx):
        out = self.body(batch)
        loss = out.pow(2).mean()
        return loss

def fit(cls):
    torch.manual_seed(0)
    model = cls()
    out = model.training_step(torch.randn(5, 4), 0)
    if out is not None:
        out.backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad for p in model.parameters()]

def run():
    return fit(Net)

def reference():
    return fit(NetReturning)
'''

# The loss bound only in a branch: a return at the method's end would fail on the paths that do not bind it.
TRAINING_STEP_LOSS_BOUND_IN_BRANCH = '''
# probe: GG103
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 3)
        self.seen = []

    def training_step(self, batch, batch_idx):
        out = self.body(batch)
        if batch_idx % 2 == 0:
            loss = out.pow(2).mean()
        self.seen.append(batch_idx)

def run():
    torch.manual_seed(0)
    model = Net()
    model.training_step(torch.randn(5, 4), 0)
    return [p.grad for p in model.parameters()]
'''

# A training_step that returns None on purpose on other batches: the batch that falls off the end may be one too.
TRAINING_STEP_RETURNS_ON_OTHER_PATH = '''
# probe: GG103
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 3)
        self.seen = []

    def training_step(self, batch, batch_idx):
        out = self.body(batch)
        loss = out.pow(2).mean()
        if batch_idx < 0:
            return None
        self.seen.append(batch_idx)

def run():
    torch.manual_seed(0)
    model = Net()
    model.training_step(torch.randn(5, 4), 0)
    return [p.grad for p in model.parameters()]
'''


def _code(source: str) -> str:
    return "GG005" if "register_forward_hook" in source else "GG004" if "chunk" in source or "split" in source \
        else "GG103" if "# probe: GG103" in source else "GG001" if "# probe: GG001" in source else "GG101"


def _found(source: str, worker, tmp_path: Path, code: str = "GG101"):
    path = tmp_path / "program.py"
    text = textwrap.dedent(source)
    path.write_text(text, encoding="utf-8")
    result = worker.probe(path, ProbeOptions(entry="run", timeout=60))
    found = [d for d in diagnostics(result, str(path)) if d.path == str(path) and d.code == code]
    assert found, [(d.code, d.line, d.message) for d in diagnostics(result, str(path))]
    return path, text, found


@pytest.mark.parametrize("source", [STALE_GRADS_IN_NESTED_LOOP, STALE_GRADS_TWO_LOSSES,
                                    SYNCED_THEN_ALIASED_AMONG_OTHERS, HOOK_STORES_OUTPUT_IN_DICT,
                                    CHUNKS_OF_OUTPUT_SCALED_BY_METHOD, DEAD_TERM_IN_NO_GRAD_BLOCK_OF_METHOD,
                                    LOSS_IN_NO_GRAD_BLOCK_OF_LOOP, DEAD_TERM_FROM_HELPER_CALLED_IN_BLOCK,
                                    GUARDED_TOGGLE_OF_TWO_STATEMENTS, STATE_PROPERTY_READ_THEN_SCALED_BY_SETTER,
                                    STEP_BEFORE_HELPER_BACKWARD_OF_KEPT_FEATURES, OPTIMIZER_BEFORE_HELPER_WIDENS_LAYERS,
                                    BATCH_NORM_OF_OWN_DETACHED_STATS, TRAINING_STEP_ENDS_IN_LOOP],
                         ids=["stale_grads_nested_loop", "stale_grads_two_losses", "synced_then_aliased_among_others",
                              "hook_stores_output_in_dict", "chunks_of_output_scaled_by_method",
                              "dead_term_in_no_grad_block_of_method", "loss_in_no_grad_block_of_loop",
                              "dead_term_from_helper_called_in_block", "guarded_toggle_of_two_statements",
                              "state_property_read_then_scaled_by_setter", "step_before_helper_backward_of_kept_features",
                              "optimizer_before_helper_widens_layers", "batch_norm_of_own_detached_stats",
                              "training_step_ends_in_loop"])
def test_probe_only_edit_is_proven(source: str, worker, tmp_path: Path):
    path, text, found = _found(source, worker, tmp_path, _code(source))
    fixes = fixes_for(text, str(path), found)
    assert len(fixes) == len(found), [(d.line, d.message) for d in found]
    assert_fix_proven(text, path, [e for fix in fixes.values() for e in fix.edits], tmp_path / "fixed.py")


@pytest.mark.parametrize("source", [ACCUMULATED_STEP_UNDER_CONDITION, OPTIMIZER_REBOUND_IN_BLOCK,
                                    HOOK_KEEPS_OUTPUT_TWICE, PIECES_OF_NAMED_TENSOR, LOSS_IN_NO_GRAD_BLOCK_FROM_ITS_FEATURES,
                                    DEAD_TERM_ON_THE_BLOCK_LINE, GUARD_ALSO_SKIPS_FROZEN_ELSEWHERE,
                                    STATE_READ_TWICE_BY_THE_OP, STEP_BEFORE_HELPER_WITH_FRESH_FORWARD,
                                    OPTIMIZER_OF_LIST_MADE_BEFORE_HELPER, SCHEDULER_BETWEEN_OPTIMIZER_AND_HELPER,
                                    BATCH_NORM_TRAINING_FLAG_A_VALUE, TRAINING_STEP_LOSS_BOUND_IN_BRANCH,
                                    TRAINING_STEP_RETURNS_ON_OTHER_PATH],
                         ids=["accumulated_step_under_condition", "optimizer_rebound_in_block",
                              "hook_keeps_output_twice", "pieces_of_named_tensor",
                              "loss_in_no_grad_block_from_its_features", "dead_term_on_the_block_line",
                              "guard_also_skips_frozen_elsewhere", "state_read_twice_by_the_op",
                              "step_before_helper_with_fresh_forward", "optimizer_of_list_made_before_helper",
                              "scheduler_between_optimizer_and_helper", "batch_norm_training_flag_a_value",
                              "training_step_loss_bound_in_branch",
                              "training_step_returns_on_other_path"])
def test_probe_only_edit_is_refused(source: str, worker, tmp_path: Path):
    path, text, found = _found(source, worker, tmp_path, _code(source))
    assert not fixes_for(text, str(path), found)
