# Source: https://github.com/linkedin/Liger-Kernel/issues/254
# Title: "Are you even allowed to do these ops inplace?"
# Thread: the SwiGLU kernel's backward overwrites its saved inputs in place (to reuse their memory
# for the gradients). If an input of SwiGLU is the *output* of another custom Function that saved
# that output for its own backward (an Exponential that saves exp(x)), the Exponential's backward
# later reads the overwritten tensor. The maintainers answered the in-place reuse is intentional and
# the reporter concluded it is safer out of place.
# Kept: an Exponential Function that saves its output, a SwiGLU Function whose backward writes the
# gradients into its saved `a` and `b` in place, and x -> exp -> swiglu(x_exp, x_exp) -> loss.
# Added: the kernels are plain torch ops (so the version counter sees the writes), a small MLP
# block and a regression loss driver.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Exponential(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = torch.exp(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, out_grad):
        (out,) = ctx.saved_tensors
        return out_grad * out


class SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        c = F.silu(a) * b
        ctx.save_for_backward(a, b)
        return c

    @staticmethod
    def backward(ctx, dc):
        a, b = ctx.saved_tensors
        sig_a = torch.sigmoid(a)
        silu_a = a * sig_a
        db = dc * silu_a
        da = dc * (silu_a * (1 - sig_a) + sig_a) * b
        # memory reuse: write the gradients into the saved inputs
        a.copy_(da)
        b.copy_(db)
        return a, b


class ExpGatedBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        h = self.proj(x)
        h_exp = Exponential.apply(h)
        return SwiGLUFunction.apply(h_exp, h_exp)


if __name__ == "__main__":
    torch.manual_seed(0)
    block = ExpGatedBlock(6)
    x = torch.randn(3, 6)
    target = torch.randn(3, 6)
    loss = F.mse_loss(block(x), target)
    loss.backward()
    print(block.proj.weight.grad.norm())
