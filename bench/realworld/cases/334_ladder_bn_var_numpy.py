# Source: https://github.com/abhiskk/ladder/issues/2
# Title: "Normalization variance calculation backprop"
# Thread: in the Ladder-network implementation the decoder's reconstructions hat_z are batch-normalised
# with the statistics of the encoder's clean pre-activations (`bn_hat_z_layers`); the mean is a torch
# op but the variance is computed as `np.var(z_pre.data.numpy(), axis=0)` and wrapped back into a
# tensor, i.e. detached from backprop, which (as the author notes) breaks backprop through the
# variance of this modified batch normalisation. The fix is to compute the variance with torch ops.
# Kept: StackedDecoders.bn_hat_z_layers (ones.mm(mean), numpy variance re-wrapped as a tensor,
# division by sqrt(var + 1e-5)), the decoder combinator g with a1..a10 parameters, the clean encoder
# pre-activations z_pre, and the denoising reconstruction cost. Added: a one-layer encoder/decoder,
# shapes, and the comparison with the torch-variance version.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Decoder(nn.Module):
    def __init__(self, d_in):
        super().__init__()
        init = [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
        self.a = nn.ParameterList(nn.Parameter(v * torch.ones(1, d_in)) for v in init)

    def g(self, tilde_z_l, u_l):
        a = self.a
        mu_l = a[0] * torch.sigmoid(a[1] * u_l + a[2]) + a[3] * u_l + a[4]
        v_l = a[5] * torch.sigmoid(a[6] * u_l + a[7]) + a[8] * u_l + a[9]
        return (tilde_z_l - mu_l) * v_l + mu_l


class StackedDecoders(nn.Module):
    @staticmethod
    def bn_hat_z_layers(hat_z_layers, z_pre_layers):
        out = []
        for hat_z, z_pre in zip(hat_z_layers, z_pre_layers):
            ones = torch.ones(z_pre.size()[0], 1)
            mean = torch.mean(z_pre, 0, keepdim=True)
            var = np.var(z_pre.data.numpy(), axis=0).reshape(1, z_pre.size()[1])
            var = torch.FloatTensor(var)
            out.append(torch.div(hat_z - ones.mm(mean), ones.mm(torch.sqrt(var + 1e-5))))
        return out


class StackedDecodersFixed(StackedDecoders):
    @staticmethod
    def bn_hat_z_layers(hat_z_layers, z_pre_layers):
        out = []
        for hat_z, z_pre in zip(hat_z_layers, z_pre_layers):
            mean = torch.mean(z_pre, 0, keepdim=True)
            var = torch.var(z_pre, 0, unbiased=False, keepdim=True)
            out.append((hat_z - mean) / torch.sqrt(var + 1e-5))
        return out


class Ladder(nn.Module):
    def __init__(self, decoders_cls, d_in=6, d_hidden=5, noise_std=0.3):
        super().__init__()
        self.W = nn.Linear(d_in, d_hidden, bias=False)
        self.top = nn.Linear(d_hidden, 3)
        self.decoder = Decoder(d_hidden)
        self.decoders_cls = decoders_cls
        self.noise_std = noise_std

    def forward(self, x, noise):
        z_pre = self.W(x)
        z_clean = (z_pre - z_pre.mean(0)) / torch.sqrt(z_pre.var(0, unbiased=False) + 1e-5)
        tilde_z = self.W(x + self.noise_std * noise)
        u = F.batch_norm(self.top(F.relu(tilde_z)), None, None, training=True)
        u = u @ self.top.weight  # project back to the hidden size for the combinator
        hat_z = self.decoder.g(tilde_z, u)
        (hat_z_bn,) = self.decoders_cls.bn_hat_z_layers([hat_z], [z_pre])
        return F.mse_loss(hat_z_bn, z_clean.detach())


def grads(model, x, noise):
    model.zero_grad()
    model(x, noise).backward()
    return [p.grad.clone() for p in model.parameters()]


if __name__ == "__main__":
    torch.manual_seed(0)
    x, noise = torch.randn(8, 6), torch.randn(8, 6)
    buggy = Ladder(StackedDecoders)
    fixed = Ladder(StackedDecodersFixed)
    fixed.load_state_dict(buggy.state_dict())
    g_bug = grads(buggy, x, noise)
    g_fix = grads(fixed, x, noise)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
