# Source: https://github.com/pytorch/pytorch/issues/81417
# Title: "Add a check to detect mutation of the inputs during backward"
# Thread: a custom Function's backward (vjp) modifies the incoming gradient in place and returns it.
# The gradient it receives can be the very tensor the user passed as grad_outputs, so the user's
# tensor is silently changed and later computations that reuse it get wrong gradients; the thread
# asks for a check because autograd lets this through. The fix is to compute a new tensor in backward.
# Kept: a Function whose backward mutates its grad argument and returns it, called through
# torch.autograd.grad with a user-provided grad_outputs tensor that is printed/reused afterwards.
# Added: the straight-through clip Function, a small model, and a saliency loop that reuses one
# cotangent tensor for two batches (the second batch's saliency is computed from a corrupted cotangent).
import torch
import torch.nn as nn


class StraightThroughClip(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(-1.0, 1.0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        grad.masked_fill_(x.abs() > 1.0, 0.0)
        return grad


class StraightThroughClipFixed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(-1.0, 1.0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad.masked_fill(x.abs() > 1.0, 0.0)


class ClippedNet(nn.Module):
    def __init__(self, clip_fn):
        super().__init__()
        self.lin = nn.Linear(4, 6)
        self.clip_fn = clip_fn

    def forward(self, x):
        return self.clip_fn.apply(3.0 * self.lin(x))


def saliencies(model, batches, cotangent):
    maps = []
    for x in batches:
        x = x.clone().requires_grad_(True)
        out = model(x)
        (g,) = torch.autograd.grad(out, x, grad_outputs=cotangent)
        maps.append(g)
    return maps


if __name__ == "__main__":
    torch.manual_seed(0)
    batches = [torch.randn(5, 4) for _ in range(2)]
    buggy = ClippedNet(StraightThroughClip)
    fixed = ClippedNet(StraightThroughClipFixed)
    fixed.load_state_dict(buggy.state_dict())
    got = saliencies(buggy, batches, torch.ones(5, 6))
    want = saliencies(fixed, batches, torch.ones(5, 6))
    same = all(torch.allclose(a, b) for a, b in zip(got, want))
    if not same:
        print("gradguard-case: gradients differ from the fix")
