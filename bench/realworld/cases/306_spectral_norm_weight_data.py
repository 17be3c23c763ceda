# Source: https://github.com/pytorch/pytorch/pull/6929
# Title: "add spectral normalization [pytorch]"
# Thread: in review of the first spectral-norm implementation, a reviewer points at
# `weight.data /= sigma` and asks why the normalisation was made non-differentiable; the author
# answers that this was a bug fixed before release by making it differentiable (weight / sigma), so
# gradients flow through sigma as in the paper.
# Kept: a hook-style spectral norm that keeps `weight_orig`, runs power iteration on buffers `u`,
# computes sigma = u^T W v and divides the weight by sigma through `.data`. Added: the small
# discriminator, the driver that compares one step's gradient with the differentiable version.
import torch
import torch.nn as nn
import torch.nn.functional as F


class SpectralNormLinear(nn.Module):
    def __init__(self, in_features, out_features, n_power_iterations=1, eps=1e-12):
        super().__init__()
        self.weight_orig = nn.Parameter(torch.randn(out_features, in_features) * 0.5)
        self.bias = nn.Parameter(torch.zeros(out_features))
        self.register_buffer("u", F.normalize(torch.randn(out_features), dim=0))
        self.n_power_iterations = n_power_iterations
        self.eps = eps

    def compute_weight(self):
        weight = self.weight_orig
        u = self.u
        for _ in range(self.n_power_iterations):
            v = F.normalize(torch.matmul(weight.t(), u), dim=0, eps=self.eps)
            u = F.normalize(torch.matmul(weight, v), dim=0, eps=self.eps)
        sigma = torch.dot(u, torch.matmul(weight, v))
        weight.data /= sigma
        return weight

    def forward(self, x):
        return F.linear(x, self.compute_weight(), self.bias)


class SpectralNormLinearFixed(SpectralNormLinear):
    def compute_weight(self):
        weight = self.weight_orig
        u = self.u
        with torch.no_grad():
            for _ in range(self.n_power_iterations):
                v = F.normalize(torch.matmul(weight.t(), u), dim=0, eps=self.eps)
                u = F.normalize(torch.matmul(weight, v), dim=0, eps=self.eps)
        sigma = torch.dot(u, torch.matmul(weight, v))
        return weight / sigma


class Critic(nn.Module):
    def __init__(self, layer_cls):
        super().__init__()
        self.l1 = layer_cls(8, 16)
        self.l2 = layer_cls(16, 1)

    def forward(self, x):
        return self.l2(F.leaky_relu(self.l1(x), 0.2))


def critic_grads(model, real, fake):
    model.zero_grad()
    loss = F.relu(1.0 - model(real)).mean() + F.relu(1.0 + model(fake)).mean()
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


if __name__ == "__main__":
    torch.manual_seed(0)
    buggy = Critic(SpectralNormLinear)
    fixed = Critic(SpectralNormLinearFixed)
    fixed.load_state_dict(buggy.state_dict())
    real, fake = torch.randn(6, 8), torch.randn(6, 8)
    g_bug = critic_grads(buggy, real, fake)
    g_fix = critic_grads(fixed, real, fake)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
