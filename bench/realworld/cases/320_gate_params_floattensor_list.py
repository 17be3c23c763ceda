# Source: https://github.com/pytorch/pytorch/issues/61410
# Title: "requires grad get lost during transform."
# Thread: converting a list of nn.Parameters with requires_grad=True into a tensor with
# torch.Tensor([p, ...]) / torch.FloatTensor silently drops requires_grad (torch.Tensor(p) of a single
# parameter keeps it); the reporter expected the result to behave like torch.stack([...], dim=0) or to
# raise. torch.stack is the way to build the tensor with its autograd history.
# Kept: scalar nn.Parameters gathered into one tensor with torch.Tensor([p, ...]) (stack in the fix).
# Added: a mixture-of-experts layer whose per-expert gate logits are scalar Parameters combined that
# way, the experts, and the comparison of the gradients.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ScalarGatedMixture(nn.Module):
    def __init__(self, dim=6, n_experts=3):
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(n_experts))
        self.gate_logits = nn.ParameterList(nn.Parameter(torch.randn(1)) for _ in range(n_experts))

    def mixture_weights(self):
        logits = torch.Tensor([p for p in self.gate_logits])
        return F.softmax(logits, dim=0)

    def forward(self, x):
        w = self.mixture_weights()
        outs = torch.stack([e(x) for e in self.experts], dim=0)
        return (w.view(-1, 1, 1) * outs).sum(dim=0)


class ScalarGatedMixtureFixed(ScalarGatedMixture):
    def mixture_weights(self):
        logits = torch.stack([p for p in self.gate_logits], dim=0).view(-1)
        return F.softmax(logits, dim=0)


def grads(model, x, y):
    model.zero_grad()
    F.mse_loss(model(x), y).backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]


if __name__ == "__main__":
    torch.manual_seed(0)
    x, y = torch.randn(5, 6), torch.randn(5, 6)
    buggy = ScalarGatedMixture()
    fixed = ScalarGatedMixtureFixed()
    fixed.load_state_dict(buggy.state_dict())
    g_bug = grads(buggy, x, y)
    g_fix = grads(fixed, x, y)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
