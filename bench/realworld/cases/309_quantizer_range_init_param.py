# Source: https://github.com/openvinotoolkit/nncf/pull/327
# Title: "Do not replace parameter during symmetric range init"
# Thread: range initialisation of symmetric quantizers assigned a brand-new nn.Parameter to the
# quantizer's `scale`. The initialisation can run after the optimizer received the model's parameters,
# so the optimizer keeps the old scale tensor and gradient updates of the scale are lost. The fix fills
# the existing parameter instead of replacing it.
# Kept: a symmetric fake-quantizer with a learnable `scale`, a range-init step that sets the scale from
# observed activation statistics after the optimizer exists. Added: straight-through rounding, a
# quantized MLP, the controller class, and the comparison of the gradients the optimizer sees.
import torch
import torch.nn as nn
import torch.nn.functional as F


class SymmetricQuantizer(nn.Module):
    def __init__(self, bits=8):
        super().__init__()
        self.levels = 2 ** (bits - 1) - 1
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x):
        s = self.scale.abs() + 1e-6
        q = torch.clamp(x / s, -self.levels, self.levels)
        q = q + (q.round() - q).detach()
        return q * s


class QuantizedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 10)
        self.act_q = SymmetricQuantizer()
        self.fc2 = nn.Linear(10, 3)

    def forward(self, x):
        return self.fc2(self.act_q(F.relu(self.fc1(x))))


class RangeInitController:
    def __init__(self, model):
        self.model = model

    def _observed_max(self, batch):
        with torch.no_grad():
            return F.relu(self.model.fc1(batch)).abs().max() / self.model.act_q.levels

    def init_range(self, batch):
        q = self.model.act_q
        q.scale = nn.Parameter(self._observed_max(batch).reshape(1))


class RangeInitControllerFixed(RangeInitController):
    def init_range(self, batch):
        q = self.model.act_q
        with torch.no_grad():
            q.scale.copy_(self._observed_max(batch).reshape(1))


def optimizer_grads(model, controller_cls, batch, target):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    controller_cls(model).init_range(batch)
    optimizer.zero_grad()
    F.mse_loss(model(batch), target).backward()
    return [
        torch.zeros_like(p) if p.grad is None else p.grad.clone()
        for group in optimizer.param_groups
        for p in group["params"]
    ]


if __name__ == "__main__":
    torch.manual_seed(0)
    batch, target = torch.randn(8, 6), torch.randn(8, 3)
    buggy = QuantizedMLP()
    fixed = QuantizedMLP()
    fixed.load_state_dict(buggy.state_dict())
    g_bug = optimizer_grads(buggy, RangeInitController, batch, target)
    g_fix = optimizer_grads(fixed, RangeInitControllerFixed, batch, target)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
