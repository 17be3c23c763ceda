# Source: https://github.com/pytorch/pytorch/issues/30454
# Title: "backward not called with custom op"
# Thread: a torch.autograd.Function multiplies its input in place in forward (`x *= 2.0`) and returns
# it without ctx.mark_dirty; the module then scales the returned logits in place (`logits *= s`).
# The custom backward never ran. Diagnosis in the thread: an input modified in place inside a custom
# Function must be marked dirty, and the in-place scale of its output must be written out of place
# (the reporter's commented-out `logits = logits * self.s` works).
# Kept: the Function (in-place forward, in-place grad scaling in backward), the Linear + custom op +
# in-place scale module and the mean().backward() driver. Added: small shapes, a two-step loop.
import torch
import torch.nn as nn


class DoubleOp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x *= 2.0
        return x

    @staticmethod
    def backward(ctx, grad_output):
        grad_output *= 2.0
        return grad_output


def double_op(x):
    return DoubleOp.apply(x)


class ScaledHead(nn.Module):
    def __init__(self, in_channel, out_channel, scale=400.0):
        super().__init__()
        self.fc = nn.Linear(in_channel, out_channel)
        self.s = scale

    def forward(self, inputs):
        x = self.fc(inputs)
        logits = double_op(x)
        logits *= self.s
        return logits


def train(steps=2):
    torch.manual_seed(0)
    net = ScaledHead(16, 8)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        out = net(torch.rand(4, 16))
        out.mean().backward()
        opt.step()


if __name__ == "__main__":
    train()
