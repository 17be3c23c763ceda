"""A custom Function boosts its gradient with `*=` in its backward, but nothing else holds that gradient: its
output is only scaled and squared (each op's backward makes a new gradient tensor), and the loss's backward
gets no `grad_outputs` from the caller.  The write does what returning a new tensor would."""
import torch


class GradBoost(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        grad *= 4.0
        return grad


def run():
    torch.manual_seed(0)
    w = torch.randn(5, requires_grad=True)
    out = GradBoost.apply(torch.tanh(w))
    ((out * 3.0) ** 2).sum().backward()
    return [w.grad]


def reference():
    torch.manual_seed(0)
    w = torch.randn(5, requires_grad=True)
    h = torch.tanh(w)
    boosted = h.detach() * (1 - 4.0) + h * 4.0  # value h, gradient 4x
    ((boosted * 3.0) ** 2).sum().backward()
    return [w.grad]
